package pgtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
)

// Querier is what Explain needs: a pool, a connection or a transaction.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// PlanNode is a node of a query plan, as EXPLAIN (FORMAT JSON) gives it.
type PlanNode struct {
	NodeType     string  `json:"Node Type"`
	RelationName string  `json:"Relation Name"`
	IndexName    string  `json:"Index Name"`
	ActualRows   float64 `json:"Actual Rows"` // per loop, after ExplainAnalyzed only
	ActualLoops  float64 `json:"Actual Loops"`
	// RemovedByFilter is how many rows the node read and its filter
	// dropped, per loop (after ExplainAnalyzed only).
	RemovedByFilter float64 `json:"Rows Removed by Filter"`
	// Buffers the node and those below it read, from the cache (hit) or
	// not (read), over all loops (after ExplainBuffers only).
	SharedHitBlocks  float64    `json:"Shared Hit Blocks"`
	SharedReadBlocks float64    `json:"Shared Read Blocks"`
	Plans            []PlanNode `json:"Plans"`
}

// Rows is how many rows the node returned in all (after ExplainAnalyzed
// only): Postgres gives rows per loop, and a parallel scan runs one loop per
// process, so a node's rows are counted smaller the more workers the
// server could start at that moment.
func (n PlanNode) Rows() float64 { return n.ActualRows * max(n.ActualLoops, 1) }

// Walk calls fn with the node and every node below it.
func (n PlanNode) Walk(fn func(PlanNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.Walk(fn)
	}
}

// Explain returns the plan of q on db, and the plan's JSON for messages.
func Explain(t testing.TB, db Querier, q string) (PlanNode, string) {
	t.Helper()
	return explain(t, db, "FORMAT JSON", q)
}

// ExplainAnalyzed runs q with args and returns its plan with the rows each
// node returned (ActualRows), and the plan's JSON for messages.
func ExplainAnalyzed(t testing.TB, db Querier, q string, args ...any) (PlanNode, string) {
	t.Helper()
	return explain(t, db, "ANALYZE, TIMING OFF, FORMAT JSON", q, args...)
}

// ExplainBuffers is ExplainAnalyzed that also counts the buffers each node
// read (SharedHitBlocks, SharedReadBlocks).
func ExplainBuffers(t testing.TB, db Querier, q string, args ...any) (PlanNode, string) {
	t.Helper()
	return explain(t, db, "ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON", q, args...)
}

func explain(t testing.TB, db Querier, options, q string, args ...any) (PlanNode, string) {
	t.Helper()
	var raw string
	if err := db.QueryRowContext(context.Background(), "EXPLAIN ("+options+") "+q, args...).Scan(&raw); err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	var plan []struct {
		Plan PlanNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(raw), &plan); err != nil || len(plan) != 1 {
		t.Fatalf("explain %s: %v: %s", q, err, raw)
	}
	return plan[0].Plan, raw
}

// ExplainAnalyze runs q under EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON)
// and returns the plan as text, for the documents of query plans.
func ExplainAnalyze(t testing.TB, db Querier, q string) string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON) "+q)
	if err != nil {
		t.Fatalf("explain analyze %s: %v", q, err)
	}
	defer rows.Close()
	var text []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		text = append(text, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(text, "\n")
}
