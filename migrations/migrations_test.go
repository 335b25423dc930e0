package migrations_test

import (
	"context"
	"database/sql"
	"os"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
	"hearth/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestList(t *testing.T) {
	for _, set := range []migrations.Set{migrations.EventStore, migrations.ReadModel} {
		ms, err := migrations.List(set)
		require.NoError(t, err)
		require.NotEmpty(t, ms)
		for i, m := range ms {
			require.Equal(t, i+1, m.Version, "%s migrations are numbered 1, 2, ... without holes", set)
		}
	}
}

// Several instances starting at once must not race: every Apply succeeds and
// each migration is applied exactly once.
func TestApplyConcurrently(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	defer db.Close()

	const instances = 8
	applied := make([]int, instances)
	errs := make([]error, instances)
	var wg sync.WaitGroup
	for i := range instances {
		wg.Go(func() {
			var n1, n2 int
			n1, errs[i] = migrations.Apply(context.Background(), db, migrations.EventStore)
			if errs[i] == nil {
				n2, errs[i] = migrations.Apply(context.Background(), db, migrations.ReadModel)
			}
			applied[i] = n1 + n2
		})
	}
	wg.Wait()
	total := 0
	for i := range instances {
		require.NoError(t, errs[i])
		total += applied[i]
	}
	es, _ := migrations.List(migrations.EventStore)
	rm, _ := migrations.List(migrations.ReadModel)
	require.Equal(t, len(es)+len(rm), total, "each migration applied exactly once across all instances")

	var rows int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM hearth_migrations`).Scan(&rows))
	require.Equal(t, len(es)+len(rm), rows)

	// Idempotent: a later start applies nothing.
	n, err := migrations.Apply(context.Background(), db, migrations.EventStore)
	require.NoError(t, err)
	require.Zero(t, n)
}
