// Package database opens Hearth's Postgres connection pools: database/sql
// through pgx's stdlib driver, wrapped in Bun with its Postgres dialect.
package database

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// Open parses url, opens a pool of at most maxConns connections and checks
// that the server answers.
func Open(ctx context.Context, url string, maxConns int) (*bun.DB, error) {
	return OpenWith(ctx, url, maxConns, Options{})
}

// Options are a pool's session settings, sent with the connection's
// start-up message (no statement, no round trip).
type Options struct {
	// ApplicationName names the sessions (pg_stat_activity.application_name).
	ApplicationName string
	// StatementTimeout, when positive, cancels any statement of the pool
	// that runs longer (statement_timeout, in milliseconds).
	StatementTimeout time.Duration
	// Lazy opens the pool without checking that the server answers: a
	// read replica may be down when Hearth starts, and is used once it
	// answers.
	Lazy bool
	// Log receives, through a multi-host URL, each failed attempt to find
	// the primary while Open keeps trying. Defaults to slog.Default().
	Log *slog.Logger

	// pingIdle is how long a pooled connection sits idle before it is
	// checked (pinged) on reuse; 0 is pgx stdlib's default, a second. A
	// server that went away while the connection sat in the pool (a
	// failover: Patroni restarts a demoted primary as a standby, which ends
	// its sessions; Postgres cannot demote in place) is seen by the ping,
	// and the pool dials again, through the multi-host URL to the new
	// primary. A busy connection, reused within the second, costs no
	// round trip; its next statement fails instead, once.
	pingIdle time.Duration
}

// OpenWith is Open with session settings.
func OpenWith(ctx context.Context, url string, maxConns int, opts Options) (*bun.DB, error) {
	sqldb, err := openSQL(ctx, url, maxConns, opts)
	if err != nil {
		return nil, err
	}
	return bun.NewDB(sqldb, pgdialect.New()), nil
}

// OpenSQL is Open without Bun. A non-empty applicationName names the pool's
// sessions (pg_stat_activity.application_name).
func OpenSQL(ctx context.Context, url string, maxConns int, applicationName string) (*sql.DB, error) {
	return openSQL(ctx, url, maxConns, Options{ApplicationName: applicationName})
}

func openSQL(ctx context.Context, url string, maxConns int, opts Options) (*sql.DB, error) {
	cfg, err := ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if opts.ApplicationName != "" {
		cfg.RuntimeParams["application_name"] = opts.ApplicationName
	}
	if opts.StatementTimeout > 0 {
		cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(max(opts.StatementTimeout.Milliseconds(), 1), 10)
	}
	idle := cmp.Or(opts.pingIdle, time.Second)
	if multi, _ := splitHosts(cfg); multi != nil {
		// Through a multi-host URL (a Patroni cluster) every reuse is
		// checked, at the cost of a round trip: a statement sent on a
		// connection to a frozen primary would wait for the caller's
		// deadline, the check for checkTimeout only, and the host it
		// finds silent is left by every connection of the process.
		idle = -1
	}
	sqldb := sql.OpenDB(newConnector(cfg, stdlib.OptionShouldPing(func(_ context.Context, p stdlib.ShouldPingParams) bool {
		return p.IdleDuration > idle
	})))
	sqldb.SetMaxOpenConns(maxConns)
	sqldb.SetMaxIdleConns(maxConns)
	sqldb.SetConnMaxIdleTime(5 * time.Minute)
	if opts.Lazy {
		return sqldb, nil
	}
	if err := firstPing(ctx, sqldb, cfg, opts.Log); err != nil {
		_ = sqldb.Close()
		return nil, fmt.Errorf("connect to %s/%s: %w", hosts(cfg), cfg.Database, err)
	}
	return sqldb, nil
}

// firstPing checks that the server answers. Through a multi-host URL, while
// no host accepts writes (a failover under way, every node a standby), it
// keeps trying with backoff until ctx ends, and logs each attempt's
// answers (NoPrimaryError). Through a one-host URL (a virtual IP or a proxy
// that follows a Patroni cluster's leader, or a single server restarting)
// it waits the same way while the server cannot be reached
// (UnreachableError): an instance that gave up there would stay down for
// its supervisor's restart backoff after the database is back. Any other
// failure (a wrong password, a missing database) ends it at once.
func firstPing(ctx context.Context, sqldb *sql.DB, cfg *pgx.ConnConfig, log *slog.Logger) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 200*time.Millisecond, 5*time.Second, 0
	for attempt := 1; ; attempt++ {
		pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := sqldb.PingContext(pingCtx)
		cancel()
		var none *NoPrimaryError
		var unreachable *UnreachableError
		if err == nil || ctx.Err() != nil || (!errors.As(err, &none) && !errors.As(err, &unreachable)) {
			return err
		}
		wait := bo.NextBackOff()
		if none == nil {
			cmp.Or(log, slog.Default()).Warn("the database server does not answer; trying again",
				"host", hosts(cfg), "database", cfg.Database, "error", unreachable.Error(), "attempt", attempt, "retry_in", wait)
		} else {
			cmp.Or(log, slog.Default()).Warn("no primary among the database hosts; trying again",
				"hosts", hosts(cfg), "database", cfg.Database, "answers", strings.Join(none.Answers, "; "), "attempt", attempt, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// SQL returns the database/sql pool under a Bun DB.
func SQL(db *bun.DB) *sql.DB { return db.DB }

// CreateDatabase creates database name on the server adminURL reaches,
// unless it exists (a restarted `make run` finds it). name must be a plain
// identifier: CREATE DATABASE takes no parameters.
func CreateDatabase(ctx context.Context, adminURL, name string) error {
	db, err := Open(ctx, adminURL, 1)
	if err != nil {
		return err
	}
	defer db.Close()
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = ?)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// hosts lists cfg's hosts (a multi-host URL names several) as host:port.
func hosts(cfg *pgx.ConnConfig) string {
	s := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	for _, f := range cfg.Fallbacks {
		s += fmt.Sprintf(",%s:%d", f.Host, f.Port)
	}
	return s
}
