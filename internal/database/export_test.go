package database

import (
	"context"
	"database/sql"
	"time"
)

// OpenSQLPingingAfter is OpenSQL whose pooled connections are checked on
// reuse after idle of them sat idle (the default is pgx's second), so a
// test need not wait for the check.
func OpenSQLPingingAfter(ctx context.Context, url string, maxConns int, idle time.Duration) (*sql.DB, error) {
	return openSQL(ctx, url, maxConns, Options{pingIdle: idle})
}

const CheckTimeout = checkTimeout
