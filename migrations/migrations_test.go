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

// 006_keys: an admin key created "for a merchant" before it becomes a
// platform key (no merchant) and keeps its other columns; from then on only
// admin keys are merchant-less.
func TestKeysMigrationMakesAdminKeysMerchantless(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("pgx", pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	defer db.Close()
	later := applyBefore(t, db, 6)
	_, err = db.ExecContext(ctx, `
		INSERT INTO merchants (id, name) VALUES ('00000000-0000-4000-8000-000000000001', 'acme');
		INSERT INTO api_keys (id, merchant_id, role, key_hash) VALUES
			('00000000-0000-4000-8000-00000000000a', '00000000-0000-4000-8000-000000000001', 'admin', 'a'),
			('00000000-0000-4000-8000-00000000000b', '00000000-0000-4000-8000-000000000001', 'operator', 'b')`)
	require.NoError(t, err)
	n, err := migrations.Apply(ctx, db, migrations.EventStore)
	require.NoError(t, err)
	require.Equal(t, later, n)

	var adminMerchant, opMerchant sql.NullString
	var name string
	require.NoError(t, db.QueryRow(`SELECT merchant_id, name FROM api_keys WHERE role = 'admin'`).Scan(&adminMerchant, &name))
	require.False(t, adminMerchant.Valid, "the admin key has no merchant")
	require.Empty(t, name)
	require.NoError(t, db.QueryRow(`SELECT merchant_id FROM api_keys WHERE role = 'operator'`).Scan(&opMerchant))
	require.Equal(t, "00000000-0000-4000-8000-000000000001", opMerchant.String, "other keys keep theirs")

	_, err = db.Exec(`INSERT INTO api_keys (id, merchant_id, role, key_hash) VALUES ('00000000-0000-4000-8000-00000000000c', NULL, 'operator', 'c')`)
	require.ErrorContains(t, err, "api_keys_admin_has_no_merchant")
	_, err = db.Exec(`INSERT INTO api_keys (id, merchant_id, role, key_hash) VALUES ('00000000-0000-4000-8000-00000000000d', '00000000-0000-4000-8000-000000000001', 'admin', 'd')`)
	require.ErrorContains(t, err, "api_keys_admin_has_no_merchant")
}
