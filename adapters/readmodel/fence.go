package readmodel

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/uptrace/bun"
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

// fenceSQL reads the current term and locks its row FOR SHARE until the
// transaction ends, so a new leader's increment (a row lock) waits for this
// transaction, and this transaction, if it comes later, reads the new term.
// It also sets, for this transaction only, the idle timeout and hearth.term,
// which change_log.term defaults to.
const fenceSQL = `SELECT term,
	set_config('idle_in_transaction_session_timeout', ?, true),
	set_config('hearth.term', ?, true)
FROM projection_leader WHERE name = ? FOR SHARE`

// checkFence verifies the term of ctx's Fence inside tx. It must be the
// transaction's first statement: every projection transaction then locks
// the term row before any read-model row, so they cannot deadlock on it.
func checkFence(ctx context.Context, tx bun.Tx) error {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	if !ok {
		return nil
	}
	var current int64
	var ignored1, ignored2 string
	err := tx.QueryRowContext(ctx, fenceSQL,
		strconv.FormatInt(f.Lease.Milliseconds(), 10), strconv.FormatInt(f.Term, 10), f.Lock,
	).Scan(&current, &ignored1, &ignored2)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: no term begun for %s", ErrStaleTerm, f.Lock)
	}
	if err != nil {
		return fmt.Errorf("check leadership term: %w", err)
	}
	if current != f.Term {
		return fmt.Errorf("%w: this leader's term is %d, the current term is %d", ErrStaleTerm, f.Term, current)
	}
	return nil
}
