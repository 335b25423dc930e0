package database

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
)

// The pools Open and OpenSQL return wrap pgx's database/sql driver to save
// round trips, the budget of the live path and the write path:
//
//   - Bun inlines every argument into the SQL text it sends, so each of its
//     queries is a statement text never seen before. Through pgx's default
//     QueryExecModeCacheStatement, such a query costs a Parse/Describe
//     round trip before its Bind/Execute one, and it evicts a useful
//     statement from the connection's cache (a DEALLOCATE later). pgx
//     already sends an Exec without arguments through the simple protocol,
//     in one round trip; these connections do the same for a Query without
//     arguments. Queries with arguments (Hearth's own $n statements,
//     watermill-sql's) keep the cached prepared statements, which also
//     tell pgx how to encode their arguments.
//   - WithBegin sends a statement with the transaction's BEGIN, in one
//     round trip (the projections' fencing check).
//   - WithCommit sends a transaction's last statement with its COMMIT, in
//     one round trip (a projection's write).
//   - Autocommit has a caller's transaction be none, saving its BEGIN and
//     COMMIT (watermill-sql's subscriber polls).
//   - WithConn lends a pool connection as pgx sees it, so a transaction can
//     pipeline its statements (pgx.Batch), which database/sql cannot: the
//     command path sends BEGIN with its first read, and its inserts with
//     COMMIT.

// simpleWhenBare is pgx's connector, with bareQueryConn connections.
// Through a multi-host URL it holds one connector per host, and connects
// through them in the order hosts.go describes.
type simpleWhenBare struct {
	driver.Connector // the only host's, or the first's
	hosts            []host
	set              *hostSet
}

func newConnector(cfg *pgx.ConnConfig, opts ...stdlib.OptionOpenDB) simpleWhenBare {
	hosts, set := splitHosts(cfg)
	if hosts == nil {
		return simpleWhenBare{Connector: stdlib.GetConnector(*cfg, opts...)}
	}
	for i := range hosts {
		hosts[i].pool = stdlib.GetConnector(*hosts[i].cfg, opts...)
	}
	return simpleWhenBare{Connector: hosts[0].pool, hosts: hosts, set: set}
}

func (c simpleWhenBare) Connect(ctx context.Context) (driver.Conn, error) {
	var conn driver.Conn
	var addr string
	var err error
	if c.set == nil {
		if conn, err = c.Connector.Connect(ctx); err != nil && ctx.Err() == nil && !refused(err) {
			err = &UnreachableError{err: err}
		}
	} else {
		conn, addr, err = connectHosts(ctx, c.set, c.hosts, func(ctx context.Context, h host) (driver.Conn, error) {
			return h.pool.Connect(ctx)
		})
	}
	if err != nil {
		return nil, err
	}
	pgxConn, ok := conn.(*stdlib.Conn)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("database: pgx's connector returned a %T", conn)
	}
	readInUTC(pgxConn.Conn())
	return bareQueryConn{Conn: pgxConn, set: c.set, addr: addr, born: time.Now(), tx: &txState{}}, nil
}

// Driver marks the pools this package opens (HonoursWithBegin).
func (c simpleWhenBare) Driver() driver.Driver { return hearthDriver{c.Connector.Driver()} }

type hearthDriver struct{ driver.Driver }

// HonoursWithBegin reports whether db runs WithBegin's statements: only a
// pool opened by this package does; any other ignores them.
func HonoursWithBegin(db *sql.DB) bool {
	_, ok := db.Driver().(hearthDriver)
	return ok
}

// bareQueryConn is a pgx connection whose argument-less queries use the
// simple protocol and whose BeginTx honours WithBegin; every other method
// is pgx's own.
type bareQueryConn struct {
	*stdlib.Conn
	// Through a multi-host URL: the hosts' set, the host this connection
	// reached, and when.
	set  *hostSet
	addr string
	born time.Time
	// tx is the state of the transaction WithBegin's BeginTx began, if
	// any, for WithCommit.
	tx *txState
}

// txState is what a connection knows of the transaction its BeginTx began
// (pgxTx): whether one is open, and whether a statement under WithCommit
// ended it, with what error.
type txState struct {
	open, ended bool
	err         error
}

// ResetSession is pgx's check of a pooled connection before reuse, bounded
// by checkTimeout whatever the caller's deadline (see dial.go). Through a
// multi-host URL, a connection to a host found silent since it was opened,
// or to a host that is no longer the newest primary, is dropped unused;
// one whose check ran out of time marks its host silent.
func (c bareQueryConn) ResetSession(ctx context.Context) error {
	if c.set != nil && !c.set.usable(c.addr, c.born) {
		return driver.ErrBadConn
	}
	checkCtx, cancel := boundedCheck(ctx)
	defer cancel()
	err := c.Conn.ResetSession(checkCtx)
	if err != nil && c.set != nil && ctx.Err() == nil && checkCtx.Err() != nil {
		c.set.silence(c.addr, time.Now())
	}
	return err
}

func (c bareQueryConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) == 0 {
		args = []driver.NamedValue{{Ordinal: 1, Value: pgx.QueryExecModeSimpleProtocol}}
	}
	return c.Conn.QueryContext(ctx, query, args)
}

// rollbackTimeout bounds the clean-up of a failed transaction, which runs
// even when the caller's context has ended: a silent server must not keep
// it waiting.
const rollbackTimeout = 5 * time.Second

type beginKey struct{}

// WithBegin returns a context in which a transaction begun (BeginTx) runs
// stmt right after BEGIN, in the same round trip: both go as one
// simple-protocol query, so stmt carries its values inlined and its
// results are discarded. When stmt fails, BeginTx fails with its error and
// the transaction is rolled back.
func WithBegin(ctx context.Context, stmt string) context.Context {
	return context.WithValue(ctx, beginKey{}, stmt)
}

// BeginStatement returns the statement WithBegin put in ctx ("" when
// none), for a transaction begun otherwise (a pgx batch that carries its
// own BEGIN: adapters/pubsub's sessions).
func BeginStatement(ctx context.Context) string {
	stmt, _ := ctx.Value(beginKey{}).(string)
	return stmt
}

// WithoutBegin returns ctx without WithBegin's statement, for a
// transaction begun on ctx that is not the one the statement was meant for
// (the event log's read inside a fenced projection's transaction).
func WithoutBegin(ctx context.Context) context.Context {
	return context.WithValue(ctx, beginKey{}, "")
}

type autocommitKey struct{}

// Autocommit returns a context in which a transaction begun (BeginTx) is
// none: BeginTx sends nothing, each statement run through it commits on
// its own, in read committed whatever the options asked, and Commit and
// Rollback send nothing and undo nothing. It is for a caller that drives a
// transaction its statements do not need, each of them right alone, and
// saves BEGIN's and COMMIT's round trips; the session also never waits
// idle in a transaction between statements. It takes precedence over
// WithBegin.
func Autocommit(ctx context.Context) context.Context {
	return context.WithValue(ctx, autocommitKey{}, true)
}

// autocommitTx is the transaction BeginTx returns under Autocommit.
type autocommitTx struct{}

func (autocommitTx) Commit() error   { return nil }
func (autocommitTx) Rollback() error { return nil }

func (c bareQueryConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if ctx.Value(autocommitKey{}) != nil {
		return autocommitTx{}, nil
	}
	stmt, _ := ctx.Value(beginKey{}).(string)
	if stmt == "" {
		return c.Conn.BeginTx(ctx, opts)
	}
	if sql.IsolationLevel(opts.Isolation) != sql.LevelDefault || opts.ReadOnly {
		return nil, errors.New("database: WithBegin supports default transactions only")
	}
	conn := c.Conn.Conn()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: "BEGIN; " + stmt})
	if err != nil {
		// BEGIN went through and stmt failed: the session is in a failed
		// transaction, which must not go back to the pool.
		if !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
			rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			defer cancel()
			if _, rbErr := conn.Exec(rbCtx, "ROLLBACK"); rbErr != nil {
				return nil, errors.Join(err, driver.ErrBadConn)
			}
		}
		return nil, err
	}
	*c.tx = txState{open: true}
	return pgxTx{ctx: ctx, tx: tx, state: c.tx}, nil
}

// pgxTx is a pgx transaction as database/sql drives it (what pgx's stdlib
// does for the transactions it begins itself). Once a statement under
// WithCommit has ended it, Commit reports how that went and Rollback has
// nothing left to do; neither sends anything.
type pgxTx struct {
	ctx   context.Context
	tx    pgx.Tx
	state *txState
}

func (t pgxTx) Commit() error {
	s := *t.state
	*t.state = txState{}
	if s.ended {
		if s.err != nil {
			return fmt.Errorf("database: the transaction's COMMIT failed: %w", s.err)
		}
		return nil
	}
	return t.tx.Commit(t.ctx)
}

func (t pgxTx) Rollback() error {
	s := *t.state
	*t.state = txState{}
	if s.ended {
		return nil
	}
	return t.tx.Rollback(t.ctx)
}

type commitKey struct{}

// WithCommit returns a context in which a statement run (ExecContext)
// inside a transaction begun with WithBegin commits that transaction with
// it, in the same round trip: the statement and COMMIT go as one pipeline,
// the statement executed as pgx's QueryExecModeExec does (its text not
// prepared, its arguments typed by the server). The caller runs nothing
// after it in the transaction but Commit, which then sends nothing and
// reports whether the COMMIT went through.
//
// When the statement fails, COMMIT does not run: the statement returns its
// error and the transaction awaits its Rollback, as after any failed
// statement. When COMMIT fails (a deferred constraint, a serialization
// failure), the statement returns that error and the transaction is over,
// nothing of it kept. In a transaction begun otherwise, the statement runs
// as without WithCommit, and the transaction's Commit commits it.
func WithCommit(ctx context.Context) context.Context {
	return context.WithValue(ctx, commitKey{}, true)
}

func (c bareQueryConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	conn := c.Conn.Conn()
	if ctx.Value(commitKey{}) == nil || !c.tx.open || c.tx.ended || conn.PgConn().TxStatus() != 'T' {
		return c.Conn.ExecContext(ctx, query, args)
	}
	values := make([]any, 0, len(args))
	for _, a := range args {
		if _, mode := a.Value.(pgx.QueryExecMode); !mode {
			values = append(values, a.Value)
		}
	}
	var params pgx.ExtendedQueryBuilder
	if err := params.Build(conn.TypeMap(), nil, values); err != nil {
		return nil, err
	}
	pipe := conn.PgConn().StartPipeline(ctx)
	pipe.SendQueryParams(query, params.ParamValues, nil, params.ParamFormats, params.ResultFormats)
	pipe.SendQueryParams("COMMIT", nil, nil, nil, nil)
	var tag pgconn.CommandTag
	err := pipe.Sync()
	for i := 0; err == nil && i < 2; i++ {
		var res any
		if res, err = pipe.GetResults(); err != nil {
			break
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			err = fmt.Errorf("database: a pipeline answered %T", res)
			break
		}
		t, rerr := rr.Close()
		if err = rerr; err == nil && i == 0 {
			tag = t
		}
		if err != nil && i == 1 { // COMMIT failed: the transaction is over
			c.tx.ended, c.tx.err = true, err
		}
	}
	if cerr := pipe.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if !conn.IsClosed() && conn.PgConn().TxStatus() == 'I' {
			c.tx.ended, c.tx.err = true, cmp.Or(c.tx.err, err)
		}
		return nil, err
	}
	c.tx.ended = true
	return driver.RowsAffected(tag.RowsAffected()), nil
}

// WithConn runs fn on one of db's connections as a *pgx.Conn, for
// statements database/sql cannot send, such as a pgx.Batch. db must be a
// pool this package opened. The connection goes back to the pool
// afterwards; when fn leaves a transaction open (it failed half-way), the
// transaction is rolled back first, and a connection that cannot even do
// that is closed instead. A transaction left open by an fn that returned
// nil is a bug: it is rolled back too, and WithConn says so.
func WithConn(ctx context.Context, db *sql.DB, fn func(conn *pgx.Conn) error) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(func(driverConn any) error {
		bare, ok := driverConn.(bareQueryConn)
		if !ok {
			return fmt.Errorf("database: WithConn needs a pool opened by package database, not one of %T", driverConn)
		}
		conn := bare.Conn.Conn()
		err := fn(conn)
		if !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
			if err == nil {
				err = errors.New("database: WithConn's fn returned with its transaction open; rolled back")
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			defer cancel()
			if _, rbErr := conn.Exec(ctx, "ROLLBACK"); rbErr != nil {
				_ = conn.Close(ctx) // closed: database/sql drops it
			}
		}
		return err
	})
}

// readInUTC makes conn read timestamptz values in UTC. pgx reads them in the
// process's local zone (time.Local), so every time read back (a record's
// created_at, a key's last use, an audit entry) would be answered in the
// zone of the machine that read it, and differ between instances.
func readInUTC(conn *pgx.Conn) {
	conn.TypeMap().RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID,
		Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
}

// ParameterStatus returns the run-time parameter name (server_encoding,
// server_version) as the server reported it when one of db's connections
// started: no query, so it reads even where pgx refuses to run one (a
// database whose encoding is not UTF-8).
func ParameterStatus(ctx context.Context, db *sql.DB, name string) (string, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var v string
	err = conn.Raw(func(c any) error {
		switch c := c.(type) {
		case bareQueryConn:
			v = c.Conn.Conn().PgConn().ParameterStatus(name)
		case *stdlib.Conn:
			v = c.Conn().PgConn().ParameterStatus(name)
		default:
			return fmt.Errorf("database: not a pgx connection: %T", c)
		}
		return nil
	})
	return v, err
}
