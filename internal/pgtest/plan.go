package pgtest

import (
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// PlanNode is a node of a plan as EXPLAIN (FORMAT JSON) gives it.
type PlanNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	ActualRows   float64    `json:"Actual Rows"` // per loop; with analyze only
	Plans        []PlanNode `json:"Plans"`
}

// Walk calls fn with n and every node below it.
func (n PlanNode) Walk(fn func(PlanNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.Walk(fn)
	}
}

// Explain returns the plan of q on db (run, with analyze) and its JSON.
func Explain(t testing.TB, db *sql.DB, analyze bool, q string, args ...any) (PlanNode, string) {
	t.Helper()
	opts := "FORMAT JSON"
	if analyze {
		opts = "ANALYZE, TIMING OFF, FORMAT JSON"
	}
	var raw string
	require.NoError(t, db.QueryRow("EXPLAIN ("+opts+") "+q, args...).Scan(&raw), q)
	var plan []struct{ Plan PlanNode }
	require.NoError(t, json.Unmarshal([]byte(raw), &plan), raw)
	return plan[0].Plan, raw
}
