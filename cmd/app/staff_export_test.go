package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/domain/event"
	"hearth/domain/schedule"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// An operator exports everything held about one staff member (their access
// request): their record, working hours with the days off and why, their
// worker keys' names, and the schedules assigned to them without the
// customer's notes; nothing of another staff member; the export is in the
// audit log without a value, and the CLI prints the same document.
func TestStaffExport(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	a := setup(t, urls)
	staffMember := func(tag string) string {
		return a.must(http.StatusCreated, http.MethodPost, "/v1/staff", a.opA, map[string]any{
			"name": mark("name", tag), "phone": mark("phone", tag)}).Body["id"].(string)
	}
	sam, kim := staffMember("SAM"), staffMember("KIM")
	for id, tag := range map[string]string{sam: "SAM", kim: "KIM"} {
		a.must(http.StatusOK, http.MethodPut, "/v1/staff/"+id+"/working-hours", a.opA, map[string]any{
			"week":       map[string]any{"monday": []any{map[string]any{"start": "09:00", "end": "17:00"}}},
			"exceptions": []any{map[string]any{"date": "2030-03-04", "reason": "sick_day"}}})
		a.must(http.StatusCreated, http.MethodPost, "/admin/keys", a.admin, map[string]any{
			"role": "worker", "merchant": "acme", "staff_id": id, "name": mark("key", tag)})
	}
	customer := a.createCustomer(a.opA, "Export Customer")
	assign := func(staff string, day int) (order string) {
		order = a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
			"customer_id": customer, "amount_cents": 5000}).Body["id"].(string)
		start := time.Date(2030, 1, day, 9, 0, 0, 0, time.UTC)
		a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, map[string]any{
			"staff_id": staff, "start_at": start.Format(time.RFC3339), "end_at": start.Add(time.Hour).Format(time.RFC3339),
			"dispatch_note": mark("dispatch-note", "CUSTOMER")})
		return order
	}
	samsLater, samsFirst, kims := assign(sam, 8), assign(sam, 7), assign(kim, 7)
	// A schedule with notes (the API writes none; earlier releases and
	// imports did): written about the customer's visit, they are the
	// customer's.
	_, _, store := a.writeInstance()
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	withNotes := uuid.New()
	_, err = tx.Run(t.Context(), event.Meta{MerchantID: a.merchantA, Actor: "import", CorrelationID: uuid.New(), OccurredAt: time.Now()},
		func(ctx context.Context, s command.Session) error {
			start := time.Date(2030, 1, 9, 9, 0, 0, 0, time.UTC)
			sch, err := schedule.New(uuid.New(), withNotes, customer, schedule.Window{StaffID: sam, StartAt: start, EndAt: start.Add(time.Hour)},
				mark("schedule-notes", "CUSTOMER"))
			if err != nil {
				return err
			}
			s.AddSchedule(sch)
			return nil
		})
	require.NoError(t, err)
	otherMerchants := a.must(http.StatusCreated, http.MethodPost, "/v1/staff", a.opB, map[string]any{"name": "Globex Staff"}).Body["id"].(string)

	get := func(key, id string) response {
		return a.do(http.MethodGet, "/v1/staff/"+id+"/export", key, nil)
	}
	require.Eventually(t, func() bool { // the schedules are projected
		s, _ := a.do(http.MethodGet, "/v1/schedules?staff_id="+sam, a.opA, nil).Body["items"].([]any)
		return len(s) == 3
	}, 10*time.Second, 10*time.Millisecond, "Sam's three schedules projected")
	r := get(a.opA, sam)
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	for _, f := range []string{"name", "phone", "key"} {
		require.Contains(t, r.Raw, mark(f, "SAM"), "Sam's %s", f)
	}
	require.Contains(t, r.Raw, "sick_day", "the days Sam was off, and why")
	require.NotContains(t, r.Raw, "KIM", "nothing of Kim")
	require.NotContains(t, r.Raw, kims, "nothing of Kim's")
	require.NotContains(t, r.Raw, "CUSTOMER", "a schedule's notes are the customer's")
	require.NotContains(t, r.Raw, "secret")

	x, err := a.hearth().ExportStaffMemberWithResponse(t.Context(), uid(t, sam), nil, as(a.opA))
	expect(t, http.StatusOK, x, err)
	doc := x.JSON200
	require.EqualValues(t, "hearth.staff-export/1", doc.Schema)
	require.Equal(t, a.merchantA, doc.MerchantId.String())
	require.Equal(t, sam, doc.StaffMember.Id.String())
	require.Len(t, doc.WorkingHours.Exceptions, 1)
	require.Len(t, doc.Keys, 1)
	require.Equal(t, mark("key", "SAM"), doc.Keys[0].Name)
	require.Len(t, doc.Schedules, 3)
	for i, order := range []string{samsFirst, samsLater, withNotes} { // by start
		require.Equal(t, order, doc.Schedules[i].OrderId.String())
		require.Equal(t, sam, doc.Schedules[i].StaffId.String())
		require.Equal(t, []string{"notes"}, *doc.Schedules[i].Withheld)
	}

	// Who exported which staff member, and how many of each: no value.
	audit := a.auditOf(ops.ActionStaffExport)
	require.Len(t, audit, 2)
	require.Equal(t, "key:"+a.opAKeyID, audit[0].Actor)
	require.Equal(t, "staff_member/"+sam, audit[0].Target)
	require.EqualValues(t, 1, audit[0].Details["keys"])
	require.EqualValues(t, 3, audit[0].Details["schedules"])
	require.EqualValues(t, 1, audit[0].Details["exceptions"])
	entry, err := json.Marshal(audit[0])
	require.NoError(t, err)
	require.NotContains(t, string(entry), "-mark")

	// Not found: unknown, another merchant's; forbidden: worker (even
	// Sam's own: the merchant answers the request) and admin keys; a bad
	// id. None is recorded.
	requireProblem(t, get(a.opA, uuid.New()), http.StatusNotFound, "/problems/not-found")
	requireProblem(t, get(a.opA, otherMerchants), http.StatusNotFound, "/problems/not-found")
	requireProblem(t, get(a.opB, sam), http.StatusNotFound, "/problems/not-found")
	for _, key := range []string{a.worker, a.admin} {
		requireProblem(t, get(key, sam), http.StatusForbidden, "/problems/forbidden")
	}
	requireProblem(t, get(a.opA, "nope"), http.StatusBadRequest, "/problems/invalid-id")
	require.Len(t, a.auditOf(ops.ActionStaffExport), 2)

	// The CLI: the same document from the same use case, recorded for --by.
	vars := env(map[string]string{"DATABASE_URL": urls.EventStore, "READMODEL_DATABASE_URL": urls.ReadModel, "USER": "tester", "MASTER_KEY": testMasterKey})
	var stdout, stderr syncBuffer
	require.NoError(t, run(t.Context(), []string{"staff", "export", "--merchant", "acme", sam, "--by", "dpo@acme.example"}, vars, &stdout, &stderr),
		"%s", stderr.String())
	var fromAPI, fromCLI map[string]any
	require.NoError(t, json.Unmarshal(x.Body, &fromAPI))
	require.NoError(t, json.Unmarshal([]byte(stdout.String()), &fromCLI))
	require.NotEmpty(t, fromCLI["exported_at"])
	delete(fromAPI, "exported_at")
	delete(fromCLI, "exported_at")
	require.Equal(t, fromAPI, fromCLI)
	audit = a.auditOf(ops.ActionStaffExport)
	require.Len(t, audit, 3)
	require.Equal(t, "dpo@acme.example", audit[0].Actor)

	require.ErrorContains(t, run(t.Context(), []string{"staff", "export", "--merchant", "acme", "Sam"}, vars, io.Discard, io.Discard),
		"ID: must be a UUID, the staff member's id")
	require.ErrorContains(t, run(t.Context(), []string{"staff", "export", "--merchant", "globex", sam}, vars, io.Discard, io.Discard),
		`merchant "globex" has no staff member `+sam)
	require.Len(t, a.auditOf(ops.ActionStaffExport), 3)

	// After their erasure, the export shows what is left: the record
	// without a value, no hours, their keys without names; the schedules
	// keep their ids.
	a.must(http.StatusOK, http.MethodPost, "/v1/staff/"+sam+"/erase", a.opA, map[string]any{"confirm": sam})
	r = get(a.opA, sam)
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	require.NotContains(t, r.Raw, "SAM")
	require.NotContains(t, r.Raw, "sick_day")
	require.NotEmpty(t, r.Body["staff_member"].(map[string]any)["erased_at"])
	require.Len(t, r.Body["schedules"], 3)
}
