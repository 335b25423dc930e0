package ops_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/ops"
	"hearth/domain/event"
)

// heldSubjects is an erasure store and a record store: the subjects it
// holds, and the passes it was asked for, in order.
type heldSubjects struct {
	held   map[string]ops.SubjectOnRecord
	passes []string // "1:<id>" or "2:<id>"
	fail   string   // the subject whose second pass fails
}

func (h *heldSubjects) EraseSubject(_ context.Context, req ops.ErasureRequest, _ func(ops.Erasure) ops.AuditEntry) (ops.Erasure, error) {
	pass := "1:"
	if req.SecondPass {
		pass = "2:"
		if req.SubjectID == h.fail {
			return ops.Erasure{}, errors.New("connection lost")
		}
	}
	h.passes = append(h.passes, pass+req.SubjectID)
	return ops.Erasure{SubjectType: req.SubjectType, SubjectID: req.SubjectID}, nil
}

func (h *heldSubjects) PendingErasures(context.Context, bool, int) ([]ops.PendingErasure, error) {
	return nil, nil
}

func (h *heldSubjects) ErasedSubjects(context.Context) ([]ops.ErasedSubject, error) { return nil, nil }

func (h *heldSubjects) Subjects(_ context.Context, ids []string) (map[string]ops.SubjectOnRecord, error) {
	out := map[string]ops.SubjectOnRecord{}
	for _, id := range ids {
		if s, ok := h.held[id]; ok {
			out[id] = s
		}
	}
	return out, nil
}

// Reapply runs every first pass, waits once for the whole list, then every
// second pass; it erases a subject listed twice once, counts one already
// erased, lists one the database does not hold, and reports a second pass
// that failed as pending rather than failing the run.
func TestReapplyWaitsOnceAndCountsWhatItFinds(t *testing.T) {
	const (
		m       = "5f0c6a9e-0000-4000-8000-000000000001"
		ada     = "0b9f8a2e-6b1c-4c1e-9b7a-3f1e2d4c5b6a"
		bob     = "1c0a9b3f-7c2d-4d2f-8c8b-4a2f3e5d6c7b"
		erased  = "2d1b0c4a-8d3e-4e3a-9d9c-5b3a4f6e7d8c"
		missing = "3e2c1d5b-9e4f-4f4b-8ead-6c4b5a7f8e9d"
	)
	store := &heldSubjects{fail: bob, held: map[string]ops.SubjectOnRecord{
		ada:    {SubjectType: event.SubjectCustomer, MerchantID: m},
		bob:    {SubjectType: event.SubjectStaffMember, MerchantID: m},
		erased: {SubjectType: event.SubjectCustomer, MerchantID: m, Erased: true},
	}}
	x, err := ops.NewErasures(store, 5*time.Second)
	require.NoError(t, err)
	var waits []time.Duration
	x.Wait = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	r, err := ops.NewErasureRecords(store, x)
	require.NoError(t, err)
	entry := func(typ, id string) ops.ErasedSubject {
		return ops.ErasedSubject{SubjectType: typ, SubjectID: id, MerchantID: m}
	}
	got, err := r.Reapply(t.Context(), "ops: restore", []ops.ErasedSubject{entry(event.SubjectCustomer, ada), entry(event.SubjectStaffMember, bob),
		entry(event.SubjectCustomer, erased), entry(event.SubjectCustomer, missing), entry(event.SubjectCustomer, ada)})
	require.NoError(t, err)
	require.Equal(t, []string{"1:" + ada, "1:" + bob, "2:" + ada}, store.passes)
	require.Equal(t, []time.Duration{5 * time.Second}, waits, "one wait for the whole list")
	require.Len(t, got.Erased, 2)
	require.Equal(t, 2, got.AlreadyErased, "the one erased in the database, and ada listed again")
	require.Equal(t, []ops.ErasedSubject{entry(event.SubjectCustomer, missing)}, got.Absent)
	require.Equal(t, 1, got.SecondPassesPending, "bob's second pass failed: the worker runs it")
}
