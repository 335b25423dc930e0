package chaos

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// faults are the kinds of failure TestChaos injects, in turn.
var faults = []string{"sigkill", "sigterm", "terminate_backend", "sigstop", "restart_fast", "restart_immediate"}

// TestChaos runs three workers, an api process and a writer issuing
// commands through the API, injects one fault per round, and checks at the
// end that every event was applied exactly once. A round's takeover time
// runs from the fault to the first change-log row written under a newer
// term; it is printed, not asserted.
func TestChaos(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, pgtest.NewSplitDBs(t), 3)
	wr := w.startWriter(20 * time.Millisecond)
	defer func() {
		select {
		case <-wr.done:
		default:
			wr.halt()
		}
	}()

	takeovers := map[string]figures{}
	var afterRestart figures // takeover counted from pg_ctl restart's return
	for round := range *rounds {
		kind := faults[round%len(faults)]
		old, term := w.settledLeader()
		mark := w.maxChangeID()
		require.Eventually(t, func() bool { return w.maxChangeID() > mark }, time.Minute, 5*time.Millisecond, "the writer's events are being projected")
		mark = w.maxChangeID()

		injected := time.Now()
		var restarted time.Duration
		switch kind {
		case "sigkill":
			old.signal(t, syscall.SIGKILL)
		case "sigterm":
			old.signal(t, syscall.SIGTERM)
		case "terminate_backend":
			w.terminateLockSession()
		case "sigstop":
			old.signal(t, syscall.SIGSTOP)
		case "restart_fast", "restart_immediate":
			require.NoError(t, pgtest.Cluster().Restart(ctx, strings.TrimPrefix(kind, "restart_")))
			restarted = time.Since(injected)
		}
		require.Eventually(t, func() bool { return w.projectedUnder(mark, term) }, 2*time.Minute, 5*time.Millisecond,
			"round %d (%s): a leader projects under a term newer than %d", round, kind, term)
		took := time.Since(injected)
		takeovers[kind] = append(takeovers[kind], took)
		t.Logf("round %2d %-17s old leader %s (term %d): projecting under a newer term after %v", round, kind, old.name, term, took.Round(time.Millisecond))
		if restarted > 0 {
			t.Logf("         (pg_ctl restart returned after %v: %v after Postgres was back)", restarted.Round(time.Millisecond), (took - restarted).Round(time.Millisecond))
			afterRestart = append(afterRestart, took-restarted)
		}

		switch kind {
		case "sigstop":
			old.signal(t, syscall.SIGCONT)
		case "sigkill", "sigterm":
			require.Eventually(t, old.exited, 30*time.Second, 10*time.Millisecond)
			if kind == "sigterm" {
				require.Equal(t, 0, old.cmd.ProcessState.ExitCode(), "%s shuts down cleanly on SIGTERM", old.name)
				require.True(t, old.logContains("hearth stopped"))
			}
			w.replace(old)
		}
		// Every process survived (restarts included) and answers again.
		require.Eventually(t, func() bool { _, ok := w.api.ready(); return ok }, time.Minute, 10*time.Millisecond, "the api process answers")
		for _, p := range w.workers {
			require.False(t, p.exited(), "%s is still running", p.name)
		}
	}
	_, _ = w.settledLeader()
	wr.halt()
	w.checkAcknowledged(wr)
	events := w.checkExactlyOnce()
	t.Logf("writer: %d commands acknowledged (all stored), %d failed (Postgres restarting); %d events, each applied exactly once",
		wr.ok.Load(), wr.failed.Load(), events)
	var all figures
	for _, kind := range faults {
		t.Logf("takeover %-17s %v", kind, takeovers[kind])
		all = append(all, takeovers[kind]...)
	}
	t.Logf("takeover %-17s %v", "all", all)
	t.Logf("takeover %-17s %v (counted from pg_ctl restart's return)", "after restarts", afterRestart)
}
