package access

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrKeyRefused is a key that no longer works (revoked, expired, its staff
// member deactivated) found by its KeyCheck: the request is answered as
// an unknown key is.
var ErrKeyRefused = errors.New("the API key no longer works")

// KeyCheck is the check of a request's key that goes with its write,
// instead of a lookup of its own before the request runs. The API server
// starts a write of a key it authenticated lately with the principal it
// found then; the write's transaction runs the check in its first round
// trip, before anything it reads or writes, and a key that no longer
// works fails the transaction (ErrKeyRefused). So the key costs the write
// no round trip, and a key revoked before the write began writes nothing
// (the check shares a lock with the revocation: one that answered has
// waited for the writes past their check),
// even while an API instance still caches it. A request that ends without
// a transaction has its key looked up before it is answered (the API
// server's concern).
type KeyCheck struct {
	// LockSQL and LockArgs take the key's lock, shared, to the end of the
	// transaction (the key store's KeyLockSQL): a revocation takes it
	// alone, so it waits for the writes past their check, and a check that
	// comes after it waits for it. A statement of its own, run first, so
	// that the check's snapshot is taken after any such wait.
	LockSQL  string
	LockArgs []any
	// SQL and Args are a statement that fails, dividing by zero, unless
	// the key still works for the principal (the key store's
	// KeyCheckSQL).
	SQL  string
	Args []any

	state atomic.Int32
}

const (
	keyCheckPending int32 = iota
	keyCheckPassed
	keyCheckRefused
)

// Pass records that the key worked when the check ran.
func (c *KeyCheck) Pass() { c.state.CompareAndSwap(keyCheckPending, keyCheckPassed) }

// Refuse records that the key no longer works.
func (c *KeyCheck) Refuse() { c.state.CompareAndSwap(keyCheckPending, keyCheckRefused) }

// Passed reports whether the check ran and the key worked.
func (c *KeyCheck) Passed() bool { return c.state.Load() == keyCheckPassed }

// Refused reports whether the check ran and the key did not work.
func (c *KeyCheck) Refused() bool { return c.state.Load() == keyCheckRefused }

// Run runs the lock and the check with exec, one statement after the other,
// and settles the outcome (Settle): for a store whose transaction sends a
// statement at a time.
func (c *KeyCheck) Run(exec func(sql string, args ...any) error) error {
	if err := exec(c.LockSQL, c.LockArgs...); err != nil {
		return fmt.Errorf("lock the API key: %w", err)
	}
	return c.Settle(exec(c.SQL, c.Args...))
}

// Settle records the outcome of the check's statement, which ended with
// err, and returns what the write fails with: ErrKeyRefused for a key that
// no longer works (the statement divided by zero, SQLSTATE 22012, as the
// database drivers' errors tell through SQLState), any other failure
// wrapped, nil for a key that works. Every store that runs the check reads
// it here, so they cannot disagree.
func (c *KeyCheck) Settle(err error) error {
	var state interface{ SQLState() string }
	switch {
	case errors.As(err, &state) && state.SQLState() == "22012":
		c.Refuse()
		return ErrKeyRefused
	case err != nil:
		return fmt.Errorf("check the API key: %w", err)
	}
	c.Pass()
	return nil
}

type keyCheckKey struct{}

// WithKeyCheck returns ctx carrying c for the request's transaction.
func WithKeyCheck(ctx context.Context, c *KeyCheck) context.Context {
	return context.WithValue(ctx, keyCheckKey{}, c)
}

// PendingKeyCheck returns the check ctx carries that has not run yet, or
// nil.
func PendingKeyCheck(ctx context.Context) *KeyCheck {
	c, _ := ctx.Value(keyCheckKey{}).(*KeyCheck)
	if c == nil || c.state.Load() != keyCheckPending {
		return nil
	}
	return c
}
