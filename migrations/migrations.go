// Package migrations holds Hearth's schema as numbered SQL files, embedded in
// the binary, and applies them.
//
// There are two sets: "eventstore" (tenants, keys, reference data, events,
// Watermill tables) for DATABASE_URL and "readmodel" (projections, change
// log) for READMODEL_DATABASE_URL. When both URLs name one database, both
// sets go into it. Applying is idempotent, and safe when several instances
// start at once: each run holds a transaction-scoped advisory lock while it
// reads what is applied and applies the rest, all in one transaction, so a
// run that fails or is killed half-way leaves the set as it found it. A
// migration waits at most LockTimeout for a table the running instances
// use; a version recorded under another file's name is refused; versions
// recorded that the binary does not have are left alone (Unknown).
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"hearth/internal/advisory"
)

//go:embed eventstore/*.sql readmodel/*.sql
var files embed.FS

// Set names a group of migrations for one database.
type Set string

const (
	EventStore Set = "eventstore"
	ReadModel  Set = "readmodel"
)

// lockKey is the advisory lock that serialises migration runs; its value
// is fixed (see package advisory).
const lockKey = advisory.MigrationsKey

// LockTimeout bounds how long a migration waits for a lock on a table it
// changes (lock_timeout), while the running instances' statements on that
// table queue behind it.
const LockTimeout = 5 * time.Second

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// List returns the migrations of a set in version order.
func List(set Set) ([]Migration, error) {
	entries, err := fs.ReadDir(files, string(set))
	if err != nil {
		return nil, fmt.Errorf("read migrations %s: %w", set, err)
	}
	var out []Migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s/%s: name must start with a positive number and '_'", set, e.Name())
		}
		body, err := files.ReadFile(path.Join(string(set), e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s: version %d appears twice", set, out[i].Version)
		}
	}
	return out, nil
}

// Apply applies the set's migrations that db has not seen yet and returns
// how many it applied. A version db recorded under another file's name is
// an error: another build's migration of that number is not this one.
func Apply(ctx context.Context, db *sql.DB, set Set) (applied int, err error) {
	all, err := List(set)
	if err != nil {
		return 0, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		switch {
		case err == nil:
		case ctx.Err() != nil:
			// Stopped (a signal, a deadline): database/sql rolls a
			// transaction back itself when its context ends, on the
			// connection pgx closed at the cancel, so nothing was applied,
			// and a second rollback's failure would only bury the reason.
			_ = tx.Rollback()
			err = fmt.Errorf("%w (stopped: nothing of this run was applied to the %s set; start again to apply it)", err, set)
		default:
			err = errorsJoinRollback(err, tx)
		}
	}()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey); err != nil {
		return 0, fmt.Errorf("wait for the migrations lock (another instance may be migrating): %w", err)
	}
	// Set after the advisory lock, which an instance waits for while
	// another migrates (as long as that takes). A migration that changes
	// a table waits for every transaction on it, and every statement of
	// the running instances on that table queues behind it meanwhile: a
	// transaction left open on it (a pg_dump, a psql) would stop their
	// writes for as long as it stays. Giving up rolls the run back, so the
	// old instances go on serving and the next start tries again. A
	// lock_timeout the session already has (set in the URL) is kept.
	if _, err := tx.ExecContext(ctx, `SELECT set_config('lock_timeout', $1, true) WHERE current_setting('lock_timeout') = '0'`,
		strconv.FormatInt(LockTimeout.Milliseconds(), 10)); err != nil {
		return 0, fmt.Errorf("set lock_timeout: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS hearth_migrations (
		set_name   text NOT NULL,
		version    integer NOT NULL,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (set_name, version))`); err != nil {
		return 0, fmt.Errorf("create hearth_migrations: %w", err)
	}
	done, err := recorded(ctx, tx, set)
	if err != nil {
		return 0, err
	}
	for _, m := range all {
		if name, ok := done[m.Version]; ok {
			// The version alone would take another build's migration of
			// the same number (a branch, a fork) for this one, which then
			// never runs: the name tells them apart.
			if name != m.Name {
				return 0, fmt.Errorf("migrations %s: the database recorded version %d as %s, but this binary's version %d is %s: "+
					"it was migrated by another build of Hearth, and this binary's %s never ran there (see docs/operations.md, Upgrades)",
					set, m.Version, name, m.Version, m.Name, m.Name)
			}
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			var state interface{ SQLState() string }
			errors.As(err, &state)
			if len(done) == 0 && state != nil && (state.SQLState() == "42P07" || state.SQLState() == "42710") { // duplicate_table, duplicate_object
				return 0, fmt.Errorf("apply %s/%s: the database already holds what it creates, but hearth_migrations records none of the %s migrations: "+
					"it was restored or copied without hearth_migrations, or is another application's; nothing was applied (docs/operations.md, Upgrades): %w",
					set, m.Name, set, err)
			}
			if state != nil && state.SQLState() == "55P03" { // lock_not_available
				return 0, fmt.Errorf("apply %s/%s: a table it changes stayed in use by another session for longer than lock_timeout; "+
					"none of this run's migrations was applied: find the session in pg_stat_activity (a long transaction, a pg_dump) and start again "+
					"(docs/operations.md, Upgrades): %w", set, m.Name, err)
			}
			return 0, fmt.Errorf("apply %s/%s: %w", set, m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO hearth_migrations (set_name, version, name) VALUES ($1, $2, $3)`,
			string(set), m.Version, m.Name); err != nil {
			return 0, fmt.Errorf("record %s/%s: %w", set, m.Name, err)
		}
		applied++
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit migrations %s: %w", set, err)
	}
	return applied, nil
}

// Unknown returns the set's migrations db records as applied that this
// binary does not have (Version and Name; no SQL), in version order: the
// schema is newer than the binary, which happens during a rolling upgrade
// (an instance of the previous release starting after the first new one
// migrated) and after a rollback. Apply does not refuse such a database,
// since the rollout needs those instances to start; whether the binary
// works on that schema is the newer release's promise, not this one's.
func Unknown(ctx context.Context, db *sql.DB, set Set) ([]Migration, error) {
	all, err := List(set)
	if err != nil {
		return nil, err
	}
	if exists, err := recordsMigrations(ctx, db); err != nil || !exists {
		return nil, err
	}
	done, err := recorded(ctx, db, set)
	if err != nil {
		return nil, err
	}
	for _, m := range all {
		delete(done, m.Version)
	}
	var out []Migration
	for v, name := range done {
		out = append(out, Migration{Version: v, Name: name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Sets returns the sets db records at least one migration of; none when
// it has no hearth_migrations (a new database).
func Sets(ctx context.Context, db *sql.DB) ([]Set, error) {
	if exists, err := recordsMigrations(ctx, db); err != nil || !exists {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT set_name FROM hearth_migrations ORDER BY set_name`)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	defer rows.Close()
	var out []Set
	for rows.Next() {
		var set string
		if err := rows.Scan(&set); err != nil {
			return nil, fmt.Errorf("read applied migrations: %w", err)
		}
		out = append(out, Set(set))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	return out, nil
}

// recordsMigrations reports whether db has hearth_migrations (a new
// database has not).
func recordsMigrations(ctx context.Context, db *sql.DB) (bool, error) {
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('hearth_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return false, fmt.Errorf("read applied migrations: %w", err)
	}
	return exists, nil
}

// recorded returns the set's versions recorded in hearth_migrations, with
// the name of the file each was applied from.
func recorded(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, set Set) (map[int]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT version, name FROM hearth_migrations WHERE set_name = $1`, string(set))
	if err != nil {
		return nil, fmt.Errorf("read applied migrations %s: %w", set, err)
	}
	defer rows.Close()
	done := map[int]string{}
	for rows.Next() {
		var v int
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			return nil, fmt.Errorf("read applied migrations %s: %w", set, err)
		}
		done[v] = name
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read applied migrations %s: %w", set, err)
	}
	return done, nil
}

func errorsJoinRollback(err error, tx *sql.Tx) error {
	if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
		return errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
	}
	return err
}
