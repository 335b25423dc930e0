// Package pgtest gives tests a real Postgres: one throwaway cluster per test
// binary (started from the installed server binaries) and a fresh database
// per test, cloned from a template that already has the migrations.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/uptrace/bun"

	"hearth/internal/database"
	"hearth/internal/pgcluster"
	"hearth/migrations"
)

var (
	cluster *pgcluster.Cluster
	seq     atomic.Int64
)

// Templates: both sets in one database, or one set each for the split layout.
const (
	templateAll = "hearth_tpl_all"
	templateES  = "hearth_tpl_es"
	templateRM  = "hearth_tpl_rm"
)

// Main starts the cluster, runs the package's tests and stops it. Use it
// from TestMain: os.Exit(pgtest.Main(m)). The cluster trades durability for
// speed (fsync and synchronous_commit off).
func Main(m *testing.M) int { return run(m, true) }

// MainDurable is Main with the server's default durability: for tests that
// crash Postgres (pg_ctl restart -m immediate) and require every
// acknowledged commit to survive.
func MainDurable(m *testing.M) int { return run(m, false) }

func run(m *testing.M, fast bool) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	var err error
	cluster, err = pgcluster.Start(ctx, pgcluster.Options{Fast: fast, Install: true,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err == nil {
		err = makeTemplates(ctx)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		if cluster != nil {
			_ = cluster.Stop()
		}
		return 1
	}
	code := m.Run()
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: stop:", err)
	}
	return code
}

// Cluster returns the running cluster (for tests that restart it).
func Cluster() *pgcluster.Cluster { return cluster }

func makeTemplates(ctx context.Context) error {
	admin, err := sql.Open("pgx", cluster.URL("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close()
	for tpl, sets := range map[string][]migrations.Set{
		templateAll: {migrations.EventStore, migrations.ReadModel},
		templateES:  {migrations.EventStore},
		templateRM:  {migrations.ReadModel},
	} {
		if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+tpl); err != nil {
			return fmt.Errorf("create %s: %w", tpl, err)
		}
		db, err := sql.Open("pgx", cluster.URL(tpl))
		if err != nil {
			return err
		}
		for _, set := range sets {
			if _, err := migrations.Apply(ctx, db, set); err != nil {
				db.Close()
				return fmt.Errorf("migrate %s: %w", tpl, err)
			}
		}
		db.Close()
	}
	return nil
}

// URLs are the two database URLs of a test: equal in the one-database
// layout, different in the split layout.
type URLs struct {
	EventStore string
	ReadModel  string
}

// Split reports whether the layout uses two databases.
func (u URLs) Split() bool { return u.EventStore != u.ReadModel }

// NewDB creates a fresh migrated database holding both sets.
func NewDB(t testing.TB) URLs {
	url := clone(t, templateAll)
	return URLs{EventStore: url, ReadModel: url}
}

// NewSplitDBs creates a fresh event-store database and a fresh read-model
// database.
func NewSplitDBs(t testing.TB) URLs {
	return URLs{EventStore: clone(t, templateES), ReadModel: clone(t, templateRM)}
}

// NewEmptyDB creates a fresh database without any migration.
func NewEmptyDB(t testing.TB) string {
	return clone(t, "template0")
}

// Layouts returns both layouts, for tests that must hold in each.
func Layouts() map[string]func(testing.TB) URLs {
	return map[string]func(testing.TB) URLs{"one_database": NewDB, "two_databases": NewSplitDBs}
}

func clone(t testing.TB, template string) string {
	t.Helper()
	if cluster == nil {
		t.Fatal("pgtest: call pgtest.Main from TestMain")
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), seq.Add(1))
	admin, err := sql.Open("pgx", cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + name + " TEMPLATE " + template); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	return cluster.URL(name)
}

// Open opens a pool on url, closed when the test ends.
func Open(t testing.TB, url string) *bun.DB {
	t.Helper()
	db, err := database.Open(context.Background(), url, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
