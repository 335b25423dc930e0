package database_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"hearth/internal/database"
	"hearth/internal/pgtest"
)

// Unavailable tells the database being out of reach from a statement that
// was wrong or slow: only the first waits for the database.
func TestUnavailable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: syscall.ECONNREFUSED.Error(), Addr: "127.0.0.1:5432"}}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", fmt.Errorf("apply: %w", refused), true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"admin shutdown", fmt.Errorf("apply: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"cannot connect now", &pgconn.PgError{Code: "57P03"}, true},
		{"no primary", &database.NoPrimaryError{Answers: []string{"a: read-only"}}, true},
		{"bad connection", driver.ErrBadConn, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"query canceled", &pgconn.PgError{Code: "57014"}, false},
		{"deadline", fmt.Errorf("apply: %w", context.DeadlineExceeded), false},
		{"a bug", errors.New("cannot apply"), false},
		{"none", nil, false},
	} {
		require.Equal(t, tc.want, database.Unavailable(tc.err), tc.name)
	}
}

// A one-host URL (a server of its own, or a Patroni cluster behind a
// virtual IP or HAProxy that follows its leader) whose server is down or
// restarting fails a pool's new connection as the database being
// unavailable, as a multi-host URL's NoPrimaryError does: the HTTP port
// answers 503 with Retry-After, not 500, and nothing was sent. A server
// that refuses the session itself (a database that does not exist) is a
// fault of the configuration, not an outage.
func TestUnreachableServerIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := pgtest.StartCluster(t)
	url := cluster.URL("postgres")

	missing, err := database.OpenSQLPingingAfter(ctx, cluster.URL("no_such_database"), 1, time.Nanosecond)
	if err == nil {
		_ = missing.Close()
	}
	require.Error(t, err)
	require.False(t, errors.As(err, new(interface{ DatabaseUnavailable() })), "a refused session is no outage: %v", err)

	// Every reuse is checked (after 1 ns idle), as a connection idle for
	// pgx's second is: the dead connection is dropped unused, and the pool
	// dials again.
	db, err := database.OpenSQLPingingAfter(ctx, url, 1, time.Nanosecond)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, cluster.Stop())

	for name, call := range map[string]func() error{
		"query": func() error { return db.QueryRowContext(ctx, `SELECT 1`).Scan(new(int)) },
		"transaction": func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err == nil {
				_ = tx.Rollback()
			}
			return err
		},
		"WithConn": func() error { return database.WithConn(ctx, db, func(*pgx.Conn) error { return nil }) },
	} {
		err := call()
		require.Error(t, err, name)
		require.True(t, errors.As(err, new(interface{ DatabaseUnavailable() })), "%s: %v", name, err)
		require.True(t, database.Unavailable(err), name)
		require.ErrorAs(t, err, new(*pgconn.ConnectError), "%s: the cause is kept", name)
	}
}
