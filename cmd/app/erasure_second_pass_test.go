package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/vault"
	"hearth/app/ops"
	"hearth/domain/event"
	"hearth/internal/pgtest"
)

// erasurePasses are the passes the audit log records for a customer's
// erasure, in order ("1", "2").
func (a *api) erasurePasses(customer string) []string {
	a.t.Helper()
	rows, err := a.dbs.es.DB.QueryContext(a.t.Context(), `SELECT coalesce(details->>'pass', '?') FROM admin_audit
		WHERE action = $1 AND target = $2 ORDER BY id`, ops.ActionCustomerErase, event.SubjectCustomer+"/"+customer)
	require.NoError(a.t, err)
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var p string
		require.NoError(a.t, rows.Scan(&p))
		out = append(out, p)
	}
	require.NoError(a.t, rows.Err())
	return out
}

// firstPassOnly erases a new customer of merchant A, Ada, who has one
// order, by its first pass alone, as by a process that died right after
// it: the second pass is left pending, due vault.CacheFor later.
func (a *api) firstPassOnly(by string) (customer string, first ops.Erasure, store *pubsub.Store) {
	a.t.Helper()
	customer = a.createCustomer(a.opA, "Ada")
	a.createOrder(a.opA, customer, 1000)
	_, _, store = a.writeInstance()
	req := ops.ErasureRequest{By: by, MerchantID: a.merchantA, SubjectType: event.SubjectCustomer,
		SubjectID: customer, Confirm: customer, Settle: vault.CacheFor}
	first, err := store.EraseSubject(a.t.Context(), req, func(ops.Erasure) ops.AuditEntry {
		return ops.AuditEntry{Actor: by, Action: ops.ActionCustomerErase, Target: "customer/" + customer, Details: map[string]any{"pass": 1}}
	}) // then the process dies
	require.NoError(a.t, err)
	return customer, first, store
}

// secondPassesDue makes the pending second passes due now: vault.CacheFor
// is moved back rather than waited for.
func (a *api) secondPassesDue() {
	a.t.Helper()
	_, err := a.dbs.es.DB.ExecContext(a.t.Context(), `UPDATE erasure_second_passes SET due_at = due_at - interval '1 hour'`)
	require.NoError(a.t, err)
}

// An erasure whose caller goes away while it waits out the cached keys (a
// client that disconnects, Ctrl-C) still runs its second pass, and its
// result says it ran: nothing is left pending.
func TestACancelledErasureStillRunsItsSecondPass(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	a.createOrder(a.opA, customer, 1000)
	_, _, store := a.writeInstance()
	x, err := ops.NewErasures(store, vault.CacheFor)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	waits := 0
	x.Wait = func(wctx context.Context, d time.Duration) error {
		waits++
		// The caller is cancelled during the wait; the wait then ends as
		// a timer's select would, with its context's error if it has one.
		cancel()
		return wctx.Err()
	}
	e, err := x.Erase(ctx, ops.ErasureRequest{By: "test", MerchantID: a.merchantA, SubjectType: event.SubjectCustomer,
		SubjectID: customer, Confirm: customer})
	require.NoError(t, err)
	require.Equal(t, 1, waits)
	require.False(t, e.SecondPassPending, "the second pass ran: %v", e.SecondPassError)
	require.Equal(t, []string{"1", "2"}, a.erasurePasses(customer))
	pending, err := x.Pending(t.Context())
	require.NoError(t, err)
	require.Empty(t, pending)
}

// An erasure whose process dies after its first pass committed (nothing
// else ran) is completed by the erasure worker once its second pass is
// due, and not before.
func TestTheErasureWorkerCompletesAnErasureWhoseProcessDied(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer, first, store := a.firstPassOnly("test")
	require.Equal(t, 1, first.Streams)

	x, err := ops.NewErasures(store, vault.CacheFor)
	require.NoError(t, err)
	pending, err := x.Pending(t.Context())
	require.NoError(t, err)
	require.Len(t, pending, 1, "the operator sees the second pass pending")
	require.Equal(t, customer, pending[0].Request.SubjectID)
	require.Equal(t, first.SecondPassDue, pending[0].Due)

	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	round := func() (int, error) {
		ctx, cancel := context.WithCancel(t.Context())
		type outcome struct {
			ran int
			err error
		}
		got := make(chan outcome, 1)
		done := make(chan error, 1)
		go func() {
			done <- leadErasures(ctx, x, time.Hour, func(ran int, err error) { got <- outcome{ran, err}; cancel() }, log)
		}()
		o := <-got
		require.NoError(t, <-done)
		return o.ran, o.err
	}
	ran, err := round()
	require.NoError(t, err)
	require.Zero(t, ran, "not due yet: another instance may still seal with the key")
	require.Equal(t, []string{"1"}, a.erasurePasses(customer))

	a.secondPassesDue()
	ran, err = round()
	require.NoError(t, err)
	require.Equal(t, 1, ran)
	require.Equal(t, []string{"1", "2"}, a.erasurePasses(customer))
	pending, err = x.Pending(t.Context())
	require.NoError(t, err)
	require.Empty(t, pending, "the erasure is complete")
}

// An operator answering the overdue alert lists the erasures not complete
// with `app erasures list`, and where no instance runs the erasure worker
// (every instance MODE=api) completes the due ones with `app erasures run`,
// which leaves those not due yet.
func TestErasuresListAndRunFromTheCLI(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer, _, _ := a.firstPassOnly("dpo: request 7")

	out, err := cli(t.Context(), a.urls(), "erasures", "list")
	require.NoError(t, err, out)
	require.Contains(t, out, customer)
	require.Contains(t, out, "dpo: request 7")
	require.Contains(t, out, "1 erasures not complete")
	out, err = cli(t.Context(), a.urls(), "erasures", "list", "--json")
	require.NoError(t, err, out)
	var listed []pendingErasureBody
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed, 1)
	require.Equal(t, pendingErasureBody{SubjectType: event.SubjectCustomer, SubjectID: customer, MerchantID: a.merchantA,
		RequestedBy: "dpo: request 7", CorrelationID: listed[0].CorrelationID, Due: listed[0].Due}, listed[0])
	require.WithinDuration(t, time.Now().Add(vault.CacheFor), listed[0].Due, time.Minute)

	out, err = cli(t.Context(), a.urls(), "erasures", "run")
	require.NoError(t, err, out)
	require.Contains(t, out, "ran 0 second passes", "not due yet: another instance may still seal with the key")
	require.Contains(t, out, "1 erasures not complete")
	require.Equal(t, []string{"1"}, a.erasurePasses(customer))

	a.secondPassesDue()
	out, err = cli(t.Context(), a.urls(), "erasures", "run")
	require.NoError(t, err, out)
	require.Contains(t, out, "ran 1 second passes")
	require.Contains(t, out, "0 erasures not complete")
	require.Equal(t, []string{"1", "2"}, a.erasurePasses(customer))
}
