package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "POLL_INTERVAL=20ms", "LOG_LEVEL=warn")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	w := &workerProcess{cmd: cmd, addr: addr}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return w
}

// role reads the worker's leadership role from its /metrics ("" when it
// does not answer).
func (w *workerProcess) role() string {
	resp, err := http.Get("http://" + w.addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return ""
	case strings.Contains(string(body), "\nhearth_leader_is_leader 1\n"):
		return "leader"
	case strings.Contains(string(body), "\nhearth_leader_is_leader 0\n"):
		return "standby"
	}
	return ""
}

// Two worker processes on one database: exactly one projects; when it is
// killed (SIGKILL) the other takes over by itself, without a restart, and
// every event is applied exactly once.
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
	var leader, standby *workerProcess
	require.Eventually(t, func() bool {
		ra, rb := a.role(), b.role()
		switch {
		case ra == "leader" && rb == "standby":
			leader, standby = a, b
		case rb == "leader" && ra == "standby":
			leader, standby = b, a
		default:
			return false
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "one leader and one standby")

	first := createOrder()
	require.Eventually(t, func() bool { return projected(first) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "standby", standby.role(), "the standby does not project")

	require.NoError(t, leader.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	second := createOrder()
	require.Eventually(t, func() bool { return standby.role() == "leader" }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return projected(second) }, 10*time.Second, 10*time.Millisecond)
	t.Logf("takeover after SIGKILL: standby projecting %v after the kill", time.Since(killed).Round(time.Millisecond))

	var events, changes int
	require.NoError(t, es.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&events))
	require.NoError(t, es.DB.QueryRow(`SELECT count(*) FROM change_log`).Scan(&changes))
	require.Equal(t, events, changes, fmt.Sprintf("one change-log row per event (%d events)", events))
}
