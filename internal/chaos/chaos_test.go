package chaos

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/aggregates"
	"hearth/internal/harness"
	"hearth/internal/pgtest"
)

// faults are the kinds of failure TestChaos injects, in turn.
var faults = []string{"sigkill", "sigterm", "terminate_backend", "sigstop", "restart_fast", "restart_immediate"}

// TestChaos runs three workers, which share the three projections (one
// each), an api process and a writer issuing commands for every projection
// through the API; it injects one fault per round and checks at the end
// that every event was applied exactly once. A round's target is one
// projection, in turn: the signals go to the worker leading it (its other
// projections, if any, are hit too), pg_terminate_backend ends that
// projection's lock session only, and a Postgres restart hits every
// projection. A projection's takeover time runs from the fault to the
// first change-log row of that projection written under a newer term; it
// is printed per projection, not asserted. After each round the workers
// share the projections fairly again, a replacement worker included:
// that time is printed too.
func TestChaos(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, pgtest.NewSplitDBs(t), 3)
	wr := w.startWriter(20 * time.Millisecond)

	projections := aggregates.Projections()
	takeovers := map[string]map[string]figures{} // fault -> projection -> times
	var afterRestart, rebalanced figures
	for round := range *rounds {
		kind := faults[round%len(faults)]
		target := projections[(round/len(faults)+round)%len(projections)]
		leads := w.settledSpread()
		mark := w.maxChangeID()
		require.Eventually(t, func() bool {
			for _, p := range projections {
				if !w.projected(p, mark) {
					return false
				}
			}
			return true
		}, time.Minute, 5*time.Millisecond, "the writer's events are being projected, in every projection")
		mark = w.maxChangeID()

		old := leads[target].proc
		hit := []string{target}
		switch kind {
		case "restart_fast", "restart_immediate":
			hit = projections
		case "sigkill", "sigterm", "sigstop":
			hit = nil
			for _, p := range projections {
				if leads[p].proc == old {
					hit = append(hit, p)
				}
			}
		}
		injected := time.Now()
		var restarted time.Duration
		switch kind {
		case "sigkill":
			old.signal(t, syscall.SIGKILL)
		case "sigterm":
			old.signal(t, syscall.SIGTERM)
		case "terminate_backend":
			w.terminateLockSession(target)
		case "sigstop":
			old.signal(t, syscall.SIGSTOP)
		case "restart_fast", "restart_immediate":
			require.NoError(t, pgtest.Cluster().Restart(ctx, strings.TrimPrefix(kind, "restart_")))
			restarted = time.Since(injected)
		}
		// Each projection hit is taken over on its own: wait for them all
		// at once, so that each time is its own.
		took := map[string]time.Duration{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, p := range hit {
			wg.Go(func() { // polls as require.Eventually does, which must not run off the test's goroutine
				poll := time.NewTicker(5 * time.Millisecond)
				defer poll.Stop()
				for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); <-poll.C {
					if w.projectedUnder(p, mark, leads[p].term) {
						mu.Lock()
						took[p] = time.Since(injected)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		var line []string
		for _, p := range hit {
			d, ok := took[p]
			require.True(t, ok, "round %d (%s): %s projects under a term newer than %d", round, kind, p, leads[p].term)
			if takeovers[kind] == nil {
				takeovers[kind] = map[string]figures{}
			}
			takeovers[kind][p] = append(takeovers[kind][p], d)
			line = append(line, fmt.Sprintf("%s %v (term %d)", p, d.Round(time.Millisecond), leads[p].term))
			if restarted > 0 {
				afterRestart = append(afterRestart, d-restarted)
			}
		}
		t.Logf("round %2d %-17s %s: projecting under a newer term: %s", round, kind, old.name, strings.Join(line, ", "))
		if restarted > 0 {
			t.Logf("         (pg_ctl restart returned after %v)", restarted.Round(time.Millisecond))
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
		// Every process survived (restarts included) and answers again, and
		// the workers share the projections fairly again: a replacement
		// takes its share from the others, without a restart.
		require.Eventually(t, func() bool { _, ok := w.api.ready(); return ok }, time.Minute, 10*time.Millisecond, "the api process answers")
		for _, p := range w.workers {
			require.False(t, p.exited(), "%s is still running", p.name)
		}
		settling := time.Now()
		w.settledSpread()
		rebalanced = append(rebalanced, time.Since(settling))
	}
	wr.halt()
	w.checkAcknowledged(wr)
	events := w.checkExactlyOnce()
	var summary []string
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		t.Log(line)
		summary = append(summary, line)
	}
	say("writer: %d commands acknowledged (all stored), %d failed (Postgres restarting); %d events, each applied exactly once",
		wr.ok.Load(), wr.failed.Load(), events)
	all := map[string]figures{}
	for _, kind := range faults {
		var perProjection []string
		for _, p := range projections {
			f := takeovers[kind][p]
			all[p] = append(all[p], f...)
			perProjection = append(perProjection, fmt.Sprintf("%s %v", p, f))
		}
		say("takeover %-17s %s", kind, strings.Join(perProjection, "; "))
	}
	var everything figures
	for _, p := range projections {
		say("takeover %-17s %s %v", "all faults", p, all[p])
		everything = append(everything, all[p]...)
	}
	say("takeover %-17s %v", "all", everything)
	say("takeover %-17s %v (counted from pg_ctl restart's return)", "after restarts", afterRestart)
	say("spread again after %v (from the end of a takeover until every worker leads its share)", rebalanced)
	if *report != "" {
		require.NoError(t, writeReport(*report, *rounds, summary))
	}
}

// reportHeader opens docs/chaos.md.
const reportHeader = `# Leadership faults

Written by ` + "`make chaos`" + ` (internal/chaos, TestChaos) at the end of a passing run; never edit it
by hand. Three workers share the projections, an api process takes commands from a writer, and
each round injects one fault aimed at one projection's leader, in turn: SIGKILL, SIGTERM,
` + "`pg_terminate_backend`" + ` of its lock session, SIGSTOP (then SIGCONT), and Postgres restarts
(` + "`pg_ctl restart -m fast` and `-m immediate`" + `, which hit every projection). A takeover runs from
the fault to the first change-log row of the projection written under a newer term: count,
median and max per fault and projection. What the times should be, and why, is in
` + "`leader/doc.go`" + ` (Timings); the runbook is [operations.md](operations.md).

`

// writeReport writes the figures of a passing run, with the machine and
// the date, to path (make chaos: docs/chaos.md), so that the runbook links
// to measured figures instead of keeping them by hand.
func writeReport(path string, rounds int, summary []string) error {
	var b strings.Builder
	b.WriteString(reportHeader)
	fmt.Fprintf(&b, "%s; %d rounds; Postgres with fsync and synchronous_commit on\n\n", harness.Machine("make chaos"), rounds)
	b.WriteString("```\n" + strings.Join(summary, "\n") + "\n```\n")
	return writeSection(path, "make chaos", b.String())
}

// writeSection replaces the section of path that run (make chaos, make
// chaos-ha) wrote last, between its two markers, with body, and keeps the
// other's; a section not there yet is added at the end.
func writeSection(path, run, body string) error {
	begin, end := "<!-- begin "+run+" -->\n", "<!-- end "+run+" -->\n"
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := string(old)
	section := begin + body + end
	if i := strings.Index(doc, begin); i >= 0 {
		if j := strings.Index(doc[i:], end); j >= 0 {
			doc = doc[:i] + section + doc[i+j+len(end):]
			return os.WriteFile(path, []byte(doc), 0o644)
		}
	}
	if doc != "" && !strings.HasSuffix(doc, "\n\n") {
		doc += "\n"
	}
	return os.WriteFile(path, []byte(doc+section), 0o644)
}
