package database

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Bun inlines every argument into the SQL text it sends, so each of its
// queries is a statement text never seen before. Through pgx's default
// QueryExecModeCacheStatement, such a query costs a Parse/Describe round
// trip before its Bind/Execute one, and it evicts a useful statement from
// the connection's cache (a DEALLOCATE later). pgx already sends an Exec
// without arguments through the simple protocol, in one round trip;
// simpleWhenBare does the same for a Query without arguments. Queries with
// arguments (Hearth's own $n statements, watermill-sql's) keep the cached
// prepared statements, which also tell pgx how to encode their arguments.
type simpleWhenBare struct{ driver.Connector }

func (c simpleWhenBare) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pgxConn, ok := conn.(*stdlib.Conn)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("database: pgx's connector returned a %T", conn)
	}
	return bareQueryConn{pgxConn}, nil
}

// bareQueryConn is a pgx connection whose argument-less queries use the
// simple protocol; every other method is pgx's own.
type bareQueryConn struct{ *stdlib.Conn }

func (c bareQueryConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) == 0 {
		args = []driver.NamedValue{{Ordinal: 1, Value: pgx.QueryExecModeSimpleProtocol}}
	}
	return c.Conn.QueryContext(ctx, query, args)
}
