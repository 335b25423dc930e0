package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/advisory"
	"hearth/internal/aggregates"
	"hearth/internal/pgtest"
)

// buildBinary builds cmd/app once per test binary.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "app")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

type workerProcess struct {
	cmd  *exec.Cmd
	addr string
}

func startWorker(t *testing.T, bin, dbURL string) *workerProcess {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cmd := exec.Command(bin, "--mode", "worker", "--http-addr", addr)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "MASTER_KEY="+testMasterKey, "POLL_INTERVAL=20ms", "LOG_LEVEL=warn")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	w := &workerProcess{cmd: cmd, addr: addr}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return w
}

// led reads from the worker's /metrics the units it leads (the
// projections' and the other leader-only work's), and how many units there
// are (nil, 0, false when it does not answer).
func (w *workerProcess) led() ([]string, int, bool) {
	resp, err := http.Get("http://" + w.addr + "/metrics")
	if err != nil {
		return nil, 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(body), "hearth_leader_is_leader{") {
		return nil, 0, false
	}
	var out []string
	units := 0
	for _, line := range strings.Split(string(body), "\n") {
		var unit string
		var is int
		if _, err := fmt.Sscanf(line, "hearth_leader_is_leader{unit=%q} %d", &unit, &is); err != nil {
			continue
		}
		units++
		if is == 1 {
			out = append(out, unit)
		}
	}
	return out, units, true
}

// Two worker processes on one database share the leader-only units; when
// the one leading orders is killed (SIGKILL) the other takes its units over
// by itself, without a restart, and every event is applied exactly once.
//
// The fair share is of the units, not of the projections: with the four
// projections and the three other units (webhooks, plans, erasures) one
// worker may lead all four projections and the other the rest, which is
// within the share (four and three), so the test waits for the units to be
// shared, not the projections.
func TestWorkerTakeoverAfterKill(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	urls := pgtest.NewDB(t)
	es := pgtest.Open(t, urls.EventStore)
	createOrder := orderWriter(t, urls.EventStore)
	projected := func(id string) bool {
		var n int
		require.NoError(t, es.DB.QueryRow(`SELECT count(*) FROM orders WHERE id = $1`, id).Scan(&n))
		return n == 1
	}

	a, b := startWorker(t, bin, urls.EventStore), startWorker(t, bin, urls.EventStore)
	var victim, survivor *workerProcess
	var units int
	require.Eventually(t, func() bool {
		la, na, oka := a.led()
		lb, nb, okb := b.led()
		if !oka || !okb || na != nb || na < len(aggregates.Projections()) || len(la)+len(lb) != na || len(la) == 0 || len(lb) == 0 {
			return false
		}
		units = na
		victim, survivor = a, b
		if slices.Contains(lb, advisory.Projection("orders")) {
			victim, survivor = b, a
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "the workers share the units")

	first := createOrder()
	require.Eventually(t, func() bool { return projected(first) }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	second := createOrder()
	require.Eventually(t, func() bool { led, _, _ := survivor.led(); return len(led) == units }, 10*time.Second, 10*time.Millisecond,
		"the survivor leads every unit")
	require.Eventually(t, func() bool { return projected(second) }, 10*time.Second, 10*time.Millisecond)
	t.Logf("takeover after SIGKILL: the survivor projecting orders %v after the kill", time.Since(killed).Round(time.Millisecond))

	var events, changes int
	require.NoError(t, es.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&events))
	require.NoError(t, es.DB.QueryRow(`SELECT count(*) FROM change_log`).Scan(&changes))
	require.Equal(t, events, changes, fmt.Sprintf("one change-log row per event (%d events)", events))
}
