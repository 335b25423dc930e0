package database_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"hearth/internal/database"
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
