package command

import (
	"context"
	"errors"
	"time"
)

// Idempotent makes a write safe to retry. The port that takes the write
// claims its key first (one attempt holds the claim's Token at a time),
// then runs the command with the Idempotent in the context. The store that
// writes (the Transactor, or a reference-record store) renders the answer
// with Render inside its transaction and stores it there, through its
// Complete, together with what it writes: either both commit or neither, so
// a retry is answered from the stored answer and never writes again.
type Idempotent struct {
	MerchantID string
	Key        string
	// Token identifies the attempt holding the key. Storing fails when
	// another attempt has taken the key over (its lease expired), which
	// rolls the whole write back.
	Token string
	// Render turns the write's result into the answer the client gets:
	// a command's Outcome, or the reference record a store wrote (a
	// pointer to it).
	Render func(ctx context.Context, result any) (Answer, error)

	answered *Answer
}

// Answer is what a client is told about a write, as it is stored with an
// idempotency key and replayed.
type Answer struct {
	Status int
	Header map[string]string
	Body   []byte
	// Replay, when set, is what is stored and what a retry is answered
	// instead of this answer, which shows something only once (a webhook
	// endpoint's signing secret): a stored copy would outlive a rotation.
	Replay *Answer
}

// Replayed is the part of the answer that is stored and replayed.
func (a Answer) Replayed() Answer {
	if a.Replay != nil {
		return *a.Replay
	}
	return a
}

// IdempotencyRecord is what is stored of a key.
type IdempotencyRecord struct {
	// Legacy is a record stored before records had a scope (migration
	// eventstore/010): it answers any principal of its merchant, and its
	// fingerprint is the one of that version (without If-Match).
	Legacy      bool
	Fingerprint []byte
	// Answer is nil while an attempt holds the key.
	Answer *Answer
	// LockedUntil is when the holding attempt's lease ends.
	LockedUntil time.Time
	// Forgotten is a key whose answer an erasure deleted, since it named
	// the erased subject: the key was answered, so a retry with it must not
	// run the write again, whatever its request (no fingerprint is kept:
	// it hashed a body that held the person's data). Location is the
	// answer's Location header, if it had one (a path with an id).
	Forgotten bool
	Location  string
}

// ErrKeyTakenOver is the write of an attempt whose idempotency key another
// attempt took over: it was rolled back; the other attempt's answer counts.
var ErrKeyTakenOver = errors.New("idempotency key was taken over by another attempt")

// Answered is the answer stored in the write's transaction, nil until
// then.
func (i *Idempotent) Answered() *Answer { return i.answered }

// Sealed records that the answer a was committed with the write; the
// store calls it after its commit.
func (i *Idempotent) Sealed(a Answer) { i.answered = &a }

type idempotentKey struct{}

// WithIdempotent returns ctx carrying i, for the store that writes.
func WithIdempotent(ctx context.Context, i *Idempotent) context.Context {
	return context.WithValue(ctx, idempotentKey{}, i)
}

// IdempotentOf returns the Idempotent a write runs under, or nil.
func IdempotentOf(ctx context.Context) *Idempotent {
	i, _ := ctx.Value(idempotentKey{}).(*Idempotent)
	if i == nil || i.Render == nil {
		return nil
	}
	return i
}
