package chaos

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/internal/advisory"
	"hearth/internal/pgtest"
)

// The plans of TestPlanLeaderKilledMidRun: enough visits that one run of
// the generator over them lasts several takeovers, each visit its own
// transaction.
const (
	chaosPlans  = 16
	chaosVisits = 12 // daily, from tomorrow: all within the default horizon
	chaosStaff  = 3
	chaosKills  = 3
	// chaosStep is how many visits the current leader must have created
	// before it is killed: proof that it was generating.
	chaosStep = 10
)

// TestPlanLeaderKilledMidRun kills (SIGKILL) the worker leading the visit
// generator (hearth/plans) in the middle of its run, several times: each
// time once the ledger shows that the leader is creating visits and has not
// created them all. Another worker takes over and carries the run on, and
// the killed one is restarted. At the end every visit of every plan has
// exactly one order (none twice, none missing), each with its ledger row,
// and no staff member is booked twice: a visit whose window collides with
// its preferred staff member's other visit is unassigned, with the reason.
func TestPlanLeaderKilledMidRun(t *testing.T) {
	ctx := t.Context()
	// The first run starts when a worker takes the lock; a short interval
	// has a crashed run's successor run again promptly.
	w := newWorld(t, pgtest.NewDB(t), 0, "PLAN_INTERVAL=1s")
	staff := []string{w.staff}
	for i := 1; i < chaosStaff; i++ {
		var s struct {
			ID string `json:"id"`
		}
		status, err := call(http.MethodPost, w.url("/v1/staff"), w.key, map[string]any{"name": fmt.Sprint("Chaos Staff ", i)}, &s)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status)
		staff = append(staff, s.ID)
	}
	first := time.Now().UTC().AddDate(0, 0, 1) // the merchant's zone is UTC
	want := map[string]bool{}                  // plan id/visit date
	for i := range chaosPlans {
		// Windows of 90 minutes an hour apart, over fewer hours than plans
		// per staff member: many visits collide with another of their staff
		// member's.
		start := 7 + i%5
		var p struct {
			ID string `json:"id"`
		}
		status, err := call(http.MethodPost, w.url("/v1/plans"), w.key, map[string]any{
			"customer_id": w.customer, "catalog_item_id": w.item, "staff_id": staff[i%len(staff)],
			"window":     map[string]any{"start": fmt.Sprintf("%02d:00", start), "end": fmt.Sprintf("%02d:30", start+1)},
			"recurrence": map[string]any{"frequency": "daily", "interval": 1, "start": first.Format(time.DateOnly), "count": chaosVisits}}, &p)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status)
		for d := range chaosVisits {
			want[p.ID+"/"+first.AddDate(0, 0, d).Format(time.DateOnly)] = true
		}
	}
	total := len(want)

	ledger := func() int {
		var n int
		_ = w.es.DB.QueryRowContext(ctx, `SELECT count(*) FROM plan_visits`).Scan(&n)
		return n
	}
	// The workers start together: the first to be ready leads everything
	// until the others are, and starts generating at once. A killed worker's
	// replacement starts while its successor generates, for the same reason.
	began := time.Now()
	for range 3 {
		w.spawnWorker()
	}
	for kill := 0; kill < chaosKills; {
		// The generator's leader, and what it had created when found.
		var victim *proc
		var term int64
		require.Eventually(t, func() bool {
			victim, term = w.unitLeader(advisory.Plans)
			return victim != nil
		}, time.Minute, 10*time.Millisecond, "a worker leads %s", advisory.Plans)
		from := ledger()
		require.Eventually(t, func() bool { return ledger() >= from+chaosStep }, time.Minute, time.Millisecond,
			"%s (term %d) creates visits", victim.name, term)
		if r, ok := victim.ready(); !ok || r.Led[advisory.Plans] != term {
			continue // handed over to a worker that came up meanwhile: aim at the new leader
		}
		victim.signal(t, syscall.SIGKILL)
		require.Eventually(t, victim.exited, 30*time.Second, 10*time.Millisecond)
		at := ledger()
		require.Less(t, at, total, "kill %d: %s was killed before its run had created every visit", kill, victim.name)
		t.Logf("kill %d: %s (term %d) killed mid-run, %d of %d visits created", kill, victim.name, term, at, total)
		w.respawn(victim)
		kill++
	}
	for _, p := range w.workers {
		p.awaitReady(t)
	}
	require.Eventually(t, func() bool { return ledger() >= total }, time.Minute, 10*time.Millisecond, "the generator creates every visit")
	t.Logf("every visit created %v after the workers started", time.Since(began).Round(time.Millisecond))

	// Exactly one order per visit: the orders the generator created,
	// by their plan and visit date.
	var created []struct {
		OrderID string `bun:"order_id"`
		Visit   string `bun:"visit"`
	}
	require.NoError(t, w.es.NewRaw(`SELECT stream_id::text AS order_id, (data->>'plan_id') || '/' || (data->>'visit_date') AS visit
		FROM events WHERE type = 'OrderCreated' AND actor = ?`, command.GeneratorActor).Scan(ctx, &created))
	got := map[string]int{}
	for _, c := range created {
		got[c.Visit]++
		require.True(t, want[c.Visit], "order %s is of no visit of the plans: %s", c.OrderID, c.Visit)
	}
	for visit := range want {
		require.Equal(t, 1, got[visit], "visit %s has exactly one order", visit)
	}
	require.Len(t, created, total)

	// No double booking, as the read model shows it once caught up: no two
	// live schedules of a staff member overlap.
	checking := time.Now()
	w.checkExactlyOnce()
	t.Logf("the read model caught up and matched the events in %v", time.Since(checking).Round(time.Millisecond))
	var overlaps int
	require.NoError(t, w.rm.DB.QueryRowContext(ctx, `SELECT count(*) FROM schedules a JOIN schedules b
		ON a.staff_id = b.staff_id AND a.id < b.id AND a.start_at < b.end_at AND b.start_at < a.end_at
		WHERE a.status <> 'cancelled' AND b.status <> 'cancelled'`).Scan(&overlaps))
	require.Zero(t, overlaps, "no staff member is booked twice at once")

	// Each order has its ledger row, and each visit with no staff member
	// says why (every plan prefers one).
	var rows []struct {
		OrderID  string `bun:"order_id"`
		Assigned bool   `bun:"assigned"`
		Reason   string `bun:"unassigned_reason"`
		Booked   bool   `bun:"booked"`
	}
	require.NoError(t, w.es.NewRaw(`SELECT order_id::text, staff_id IS NOT NULL AS assigned, unassigned_reason,
		EXISTS (SELECT FROM bookings b WHERE b.order_id = v.order_id AND b.live AND b.staff_id = v.staff_id) AS booked
		FROM plan_visits v`).Scan(ctx, &rows))
	require.Len(t, rows, total)
	ordered := map[string]bool{}
	for _, c := range created {
		ordered[c.OrderID] = true
	}
	unassigned := 0
	for _, r := range rows {
		require.True(t, ordered[r.OrderID], "ledger row of order %s: the order exists", r.OrderID)
		if r.Assigned {
			require.True(t, r.Booked, "order %s: its staff member is booked for it", r.OrderID)
			require.Empty(t, r.Reason)
		} else {
			unassigned++
			require.NotEmpty(t, r.Reason, "order %s: unassigned, with the reason", r.OrderID)
		}
	}
	require.Positive(t, unassigned, "the plans' windows collide: some visits are unassigned")
	require.Less(t, unassigned, total, "some visits are assigned")
	var schedules int
	require.NoError(t, w.rm.DB.QueryRowContext(ctx, `SELECT count(*) FROM schedules`).Scan(&schedules))
	require.Equal(t, total-unassigned, schedules, "one schedule per assigned visit")
}

// unitLeader returns the one worker that leads unit, and its term; nil
// unless exactly one worker does.
func (w *world) unitLeader(unit string) (*proc, int64) {
	var out *proc
	var term int64
	for _, p := range w.workers {
		r, ok := p.ready()
		if !ok {
			continue
		}
		if t, leads := r.Led[unit]; leads {
			if out != nil {
				return nil, 0
			}
			out, term = p, t
		}
	}
	return out, term
}
