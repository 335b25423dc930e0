package ops_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/app/ops"
	"hearth/domain/apperr"
)

// fakeProtectStore hands out batches of events by position: each call
// answers the next of batches (a batch with an error fails that call).
type fakeProtectStore struct {
	batches []fakeBatch
	calls   []int64 // the after of each ProtectEvents call
	limit   int
	copies  int
}

type fakeBatch struct {
	did  ops.Protection
	last int64
	err  error
}

func (f *fakeProtectStore) ProtectEvents(_ context.Context, _ string, after int64, limit int) (ops.Protection, int64, error) {
	f.calls = append(f.calls, after)
	f.limit = limit
	if len(f.batches) == 0 {
		return ops.Protection{}, 0, nil
	}
	b := f.batches[0]
	f.batches = f.batches[1:]
	return b.did, b.last, b.err
}

func (f *fakeProtectStore) ProtectCopies(context.Context, int) (int, error) { return f.copies, nil }

// Protect walks the batches in order from where each ended, runs a batch
// again when a stream it marks was written meanwhile, sums what they did,
// and records the run with its counts.
func TestProtectSumsBatchesAndRetriesConflicts(t *testing.T) {
	store := &fakeProtectStore{copies: 7, batches: []fakeBatch{
		{did: ops.Protection{Found: 3, Sealed: 2, Shredded: 1, Keys: 1, Streams: 1, Position: 40}, last: 10},
		{err: &apperr.ConflictError{Detail: "stream x was changed concurrently"}},
		{did: ops.Protection{Found: 2, Sealed: 2, Keys: 1}, last: 25},
	}}
	audit := &fakeAudit{}
	p, err := ops.NewProtector(store, audit)
	require.NoError(t, err)
	out, err := p.Protect(t.Context(), ops.ProtectRequest{By: "ops"})
	require.NoError(t, err)
	require.Equal(t, []int64{0, 10, 10, 25}, store.calls, "the conflicting batch runs again from the same place")
	require.Equal(t, ops.ProtectBatchDefault, store.limit)
	require.Equal(t, ops.Protection{Found: 5, Sealed: 4, Shredded: 1, Keys: 2, Streams: 1, Position: 40, Copies: 7, Batches: 2}, out)
	require.Len(t, audit.entries, 1)
	e := audit.entries[0]
	require.Equal(t, ops.ActionPersonalDataProtect, e.Action)
	require.Equal(t, "ops", e.Actor)
	require.Equal(t, map[string]any{"events_found": 5, "sealed": 4, "shredded": 1, "data_keys_created": 2, "streams_marked": 1,
		"copies_rewritten": 7, "batches": 2, "complete": true}, e.Details)
}

// A run that fails half-way keeps what it did, says so, and is recorded
// as incomplete; a batch that conflicts again and again fails the run.
func TestProtectRecordsARunStoppedHalfWay(t *testing.T) {
	conflict := &apperr.ConflictError{Detail: "busy"}
	store := &fakeProtectStore{batches: []fakeBatch{
		{did: ops.Protection{Found: 4, Sealed: 4}, last: 9},
		{err: conflict}, {err: conflict}, {err: conflict}, {err: conflict}, {err: conflict}, {err: conflict},
	}}
	audit := &fakeAudit{}
	p, err := ops.NewProtector(store, audit)
	require.NoError(t, err)
	out, err := p.Protect(t.Context(), ops.ProtectRequest{By: "ops", Batch: 4})
	require.ErrorIs(t, err, conflict)
	require.Equal(t, 4, out.Sealed)
	require.Equal(t, []int64{0, 9, 9, 9, 9, 9, 9}, store.calls)
	require.Equal(t, false, audit.entries[0].Details["complete"])
	require.Equal(t, 4, audit.entries[0].Details["sealed"])
}

// Bad input names its field and touches nothing.
func TestProtectRefusesBadInput(t *testing.T) {
	for name, req := range map[string]ops.ProtectRequest{
		"by": {By: " "}, "batch": {By: "ops", Batch: -1},
	} {
		store, audit := &fakeProtectStore{}, &fakeAudit{}
		p, err := ops.NewProtector(store, audit)
		require.NoError(t, err)
		_, err = p.Protect(t.Context(), req)
		var invalid *apperr.ValidationError
		require.True(t, errors.As(err, &invalid), "%v", err)
		require.Equal(t, name, invalid.Fields[0].Field)
		require.Empty(t, store.calls)
		require.Empty(t, audit.entries)
	}
	p, err := ops.NewProtector(&fakeProtectStore{}, &fakeAudit{})
	require.NoError(t, err)
	_, err = p.Protect(t.Context(), ops.ProtectRequest{By: "ops", Batch: ops.ProtectBatchMax + 1})
	require.ErrorContains(t, err, "between 1 and 10000")
}
