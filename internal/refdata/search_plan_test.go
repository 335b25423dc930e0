package refdata_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/app/query"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
	"hearth/internal/refdata"
)

// statements captures the SQL a list issues (a Bun query hook), so that
// the plans judged are those of the statements Hearth runs.
type statements struct {
	mu  sync.Mutex
	sql []string
}

func (s *statements) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context { return ctx }

func (s *statements) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sql = append(s.sql, e.Query)
}

func (s *statements) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sql
	s.sql = nil
	return out
}

// searchTable is a table of reference data whose list searches names.
type searchTable struct {
	name  string
	extra string // more columns the insert sets, and their values
	list  func(db *bun.DB, merchantID, q string) (total int, err error)
}

var searchTables = []searchTable{
	{"customers", "", func(db *bun.DB, m, q string) (int, error) {
		l, err := refdata.Customers(db).List(context.Background(), m, q, query.Page{Number: 1, Size: 20})
		return l.Total, err
	}},
	{"staff", "", func(db *bun.DB, m, q string) (int, error) {
		l, err := refdata.Staff(db).List(context.Background(), m, q, query.Page{Number: 1, Size: 20})
		return l.Total, err
	}},
	{"catalog_items", ", base_price_cents|, 0", func(db *bun.DB, m, q string) (int, error) {
		l, err := refdata.CatalogItems(db).List(context.Background(), m, q, query.Page{Number: 1, Size: 20})
		return l.Total, err
	}},
}

const (
	searchOthers    = 120   // merchants of 3,000 records each, none of which matches
	searchBig       = 50000 // the big merchant's records, every one a match
	searchBigRare   = 10    // and its oldest ones, a rare name
	searchSmall     = 5     // the small merchant's records
	searchSmallHits = 3     // of which match "smith"
)

// A merchant's name search (?q= on the lists of customers, staff and
// catalog items) costs what that merchant's own records cost, however many
// matching records another merchant holds: Postgres must not read the big
// merchant's index entries or rows to answer the small one. The table holds
// 120 merchants of 3,000 records (more merchants than the statistics keep
// a count of, so a merchant the statistics do not name is estimated at
// their average size: a small merchant looks like a few thousand records
// to the planner, which then prefers an index on the name), a big merchant
// of 50,000 records that all match, and a small one of 5 of which 3 match.
// The small merchant's search, short (2 letters: no trigram in it) or long,
// reads at most twice its records in any scan and a few dozen buffers in
// each of the list's statements (the page and its capped count); the big
// merchant's reads no other merchant's rows (no sequential scan, no scan
// beyond its own records) and finds its 10 oldest records of a rare name
// through an index, without walking its 50,000. Both with the default
// random_page_cost and with 1.1. The statistics are as ANALYZE leaves them
// after the load.
func TestSearchPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 410,000 records per table; skipped with -short")
	}
	for _, table := range searchTables {
		t.Run(table.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
			ctx := context.Background()
			cols, vals, _ := strings.Cut(table.extra, "|")
			exec := func(sql string, args ...any) {
				_, err := db.DB.ExecContext(ctx, sql, args...)
				require.NoError(t, err, sql)
			}
			// The table's GIN indexes are dropped for the load and built
			// again from their own definitions: updating one in place for
			// each of 410,000 records takes several times as long.
			var gin []string
			rows, err := db.DB.QueryContext(ctx, `SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
				JOIN pg_am am ON am.oid = c.relam WHERE i.indrelid = $1::regclass AND am.amname = 'gin'`, table.name)
			require.NoError(t, err)
			for rows.Next() {
				var def string
				require.NoError(t, rows.Scan(&def))
				gin = append(gin, def)
			}
			require.NoError(t, rows.Err())
			rows.Close()
			for _, def := range gin {
				name, _, _ := strings.Cut(strings.TrimPrefix(def, "CREATE INDEX "), " ")
				exec(`DROP INDEX ` + name)
			}

			big, small := uuid.New(), uuid.New()
			exec(`INSERT INTO merchants (id, name) SELECT gen_random_uuid(), 'other ' || i FROM generate_series(1, $1) i`, searchOthers)
			exec(`INSERT INTO merchants (id, name) VALUES ($1, 'big'), ($2, 'small')`, big, small)
			exec(`INSERT INTO ` + table.name + ` (id, merchant_id, name, created_at` + cols + `)
				SELECT gen_random_uuid(), m.id, 'Person ' || i, now() - i * interval '1 second'` + vals + `
				FROM merchants m, generate_series(1, 3000) i WHERE m.name LIKE 'other %'`)
			exec(`INSERT INTO `+table.name+` (id, merchant_id, name, created_at`+cols+`)
				SELECT gen_random_uuid(), $1, CASE WHEN i > $2::int THEN 'Zoe Quigley ' ELSE 'Jane Smith ' END || i, now() - i * interval '1 minute'`+vals+`
				FROM generate_series(1, $2::int + $3::int) i`, big, searchBig, searchBigRare)
			exec(`INSERT INTO `+table.name+` (id, merchant_id, name`+cols+`)
				SELECT gen_random_uuid(), $1, n`+vals+` FROM unnest(ARRAY['Anna Smith', 'Bob Smithers', 'Carl Jones', 'Dana Smithson', 'Eve Brown']) n`, small)
			for _, def := range gin {
				exec(def)
			}
			exec(`ANALYZE ` + table.name)

			rec := &statements{}
			db.AddQueryHook(rec)
			conn, err := db.DB.Conn(ctx)
			require.NoError(t, err)
			defer conn.Close()

			for _, c := range []struct {
				who, merchant, q string
				total            int
				// the most rows a scan may read, and buffers a statement
				// (0: not bounded)
				rows, buffers float64
			}{
				{"small", small, "sm", searchSmallHits, 2 * searchSmall, 64},
				{"small", small, "smi", searchSmallHits, 2 * searchSmall, 64},
				{"small", small, "smith", searchSmallHits, 2 * searchSmall, 64},
				{"big", big, "sm", query.MaxDepth, searchBig + searchBigRare, 0},
				{"big", big, "smith", query.MaxDepth, searchBig + searchBigRare, 0},
				{"big", big, "quig", searchBigRare, 2 * searchBigRare, 64},
			} {
				name := fmt.Sprintf("%s merchant, q=%s", c.who, c.q)
				total, err := table.list(db, c.merchant, c.q)
				require.NoError(t, err, name)
				require.Equal(t, c.total, total, name)
				stmts := rec.take()
				require.Len(t, stmts, 2, "%s: the page and its count", name)
				for _, cost := range []string{"DEFAULT", "1.1"} {
					_, err := conn.ExecContext(ctx, "SET random_page_cost = "+cost)
					require.NoError(t, err)
					for _, q := range stmts {
						plan, raw := pgtest.ExplainBuffers(t, conn, q)
						plan.Walk(func(n pgtest.PlanNode) {
							require.NotEqual(t, "Seq Scan", n.NodeType, "%s, random_page_cost %s: a sequential scan of %s:\n%s\n%s", name, cost, n.RelationName, q, raw)
							if !strings.Contains(n.NodeType, "Scan") {
								return
							}
							read := n.Rows() + n.RemovedByFilter*max(n.ActualLoops, 1)
							require.LessOrEqual(t, read, c.rows, "%s, random_page_cost %s: %s read %v rows:\n%s\n%s", name, cost, n.NodeType, read, q, raw)
						})
						buffers := plan.SharedHitBlocks + plan.SharedReadBlocks
						if c.buffers > 0 {
							require.LessOrEqual(t, buffers, c.buffers, "%s, random_page_cost %s: %v buffers:\n%s\n%s", name, cost, buffers, q, raw)
						}
						t.Logf("%s, random_page_cost %s, %v buffers:\n%s\n%s", name, cost, buffers, q, pgtest.ExplainAnalyze(t, conn, q))
					}
				}
			}
		})
	}
}
