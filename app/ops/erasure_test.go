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

// failingSecondPass is an erasure store whose second pass fails.
type failingSecondPass struct{ passes []bool }

func (f *failingSecondPass) EraseSubject(_ context.Context, req ops.ErasureRequest, _ func(ops.Erasure) ops.AuditEntry) (ops.Erasure, error) {
	f.passes = append(f.passes, req.SecondPass)
	if req.SecondPass {
		return ops.Erasure{}, errors.New("connection lost")
	}
	return ops.Erasure{SubjectType: req.SubjectType, SubjectID: req.SubjectID, Streams: 2,
		SecondPassDue: time.Date(2030, 1, 1, 0, 0, 5, 0, time.UTC)}, nil
}

func (f *failingSecondPass) PendingErasures(context.Context, bool, int) ([]ops.PendingErasure, error) {
	return nil, nil
}

// A second pass that fails leaves the erasure done but not complete: the
// result says its second pass is pending (the worker runs it), with the
// error, instead of failing an erasure whose first pass committed.
func TestAFailedSecondPassIsReportedPending(t *testing.T) {
	store := &failingSecondPass{}
	x, err := ops.NewErasures(store, 5*time.Second)
	require.NoError(t, err)
	x.Wait = func(context.Context, time.Duration) error { return nil }
	id := "0b9f8a2e-6b1c-4c1e-9b7a-3f1e2d4c5b6a"
	e, err := x.Erase(t.Context(), ops.ErasureRequest{By: "test", MerchantID: "m", SubjectType: event.SubjectCustomer,
		SubjectID: id, Confirm: id})
	require.NoError(t, err)
	require.Equal(t, []bool{false, true}, store.passes)
	require.True(t, e.SecondPassPending)
	require.ErrorContains(t, e.SecondPassError, "connection lost")
	require.Equal(t, 2, e.Streams)
	require.Equal(t, time.Date(2030, 1, 1, 0, 0, 5, 0, time.UTC), e.SecondPassDue)
}
