package readmodel

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"hearth/internal/database"
)

// ErrStaleTerm is a projection transaction refused because the leadership
// term it runs under is no longer the current one: another instance has
// taken over. It must not be retried; the leader that gets it steps down.
var ErrStaleTerm = errors.New("readmodel: leadership term is no longer current")

// Fence is the leadership term that projection transactions run under (see
// package leader).
type Fence struct {
	// Lock names the term's row in projection_leader (the lock name).
	Lock string
	// Term is the term the leader began when it took the lock.
	Term int64
	// Lease becomes the transaction's idle_in_transaction_session_timeout:
	// the server ends a transaction its leader leaves idle this long (a
	// frozen process), so it cannot hold up the next term for longer.
	Lease time.Duration
	// Function is the SQL function that checks the term, with hearth_fence's
	// arguments and refusal (SQLSTATE HT001). Defaults to hearth_fence (the
	// read model's); writes to the event-store database check
	// hearth_es_fence (migration eventstore/008, adapters/webhooks).
	Function string
}

type fenceKey struct{}

// WithFence returns a context in which every projection transaction first
// checks, inside the transaction, that f.Term is still the current term,
// and fails with ErrStaleTerm otherwise. The leader passes it down to the
// projections of its term. Outside such a context (tests that apply events
// directly) nothing is checked.
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// fenced returns ctx with the fencing check of its Fence, if any, as the
// statement that runs with the transaction's BEGIN, in the same round trip
// (database.WithBegin): hearth_fence (migration readmodel/005) reads the
// current term and locks its row FOR SHARE until the transaction ends, so a
// new leader's increment (a row lock) waits for this transaction, and this
// transaction, if it comes later, reads the new term and fails. It also
// sets, for this transaction only, the idle timeout and hearth.term, which
// change_log.term defaults to. Being the transaction's first statement,
// every projection transaction locks the term row before any read-model
// row, so they cannot deadlock on it.
//
// A pool that would ignore the check (not opened by package database) is
// refused: a fenced write never goes through unchecked.
func fenced(ctx context.Context, db *sql.DB) (context.Context, error) {
	stmt, ok := FenceSQL(ctx)
	if !ok {
		return ctx, nil
	}
	if !database.HonoursWithBegin(db) {
		return nil, errors.New("readmodel: the read-model pool was not opened by package database, so it cannot check the leadership term")
	}
	return database.WithBegin(ctx, stmt), nil
}

// FenceSQL is the fencing check of ctx's Fence, as a statement with its
// values inlined, for a transaction sent as a pgx batch (its first
// statement after BEGIN); false when ctx carries no Fence.
func FenceSQL(ctx context.Context) (string, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("SELECT %s(%s, %d, %d)", cmp.Or(f.Function, "hearth_fence"), quoteLiteral(f.Lock), f.Term, f.Lease.Milliseconds()), true
}

// Fenced is fenced for the stores outside this package that write under a
// leadership term (adapters/webhooks): ctx for a transaction on db whose
// BEGIN checks the term of ctx's Fence, if any.
func Fenced(ctx context.Context, db *sql.DB) (context.Context, error) { return fenced(ctx, db) }

// StaleTerm turns a fencing function's refusal (SQLSTATE HT001) into
// ErrStaleTerm; other errors pass through.
func StaleTerm(err error) error { return staleTerm(err) }

// staleTerm turns hearth_fence's refusal into ErrStaleTerm.
func staleTerm(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == fenceRefused {
		return fmt.Errorf("%w: %s", ErrStaleTerm, pgErr.Message)
	}
	return err
}

// fenceRefused is the SQLSTATE of hearth_fence's refusal.
const fenceRefused = "HT001"

// quoteLiteral is s as an SQL string literal (standard_conforming_strings).
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
