package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/advisory"
	"hearth/internal/aggregates"
	"hearth/internal/pgtest"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds cmd/app once per test binary.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hearth-chaos-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "app")
		out, err := exec.Command("go", "build", "-o", binPath, "hearth/cmd/app").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w: %s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// client answers quickly or not at all: a frozen process must not stall the
// test.
var client = &http.Client{Timeout: time.Second}

// masterKey is the workers' MASTER_KEY: fixed, since every process of a
// test must open what another sealed.
const masterKey = "chaos:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

// proc is one Hearth process.
type proc struct {
	name string
	cmd  *exec.Cmd
	addr string
	log  string // its standard error
	done chan struct{}
}

// start runs the binary in mode against urls and waits until it is ready;
// the process is killed when the test ends, and its log is printed if the
// test failed.
func start(t *testing.T, name, mode string, urls pgtest.URLs, env ...string) *proc {
	t.Helper()
	p := spawn(t, name, mode, urls, env...)
	p.awaitReady(t)
	return p
}

// spawn is start without the wait.
func spawn(t *testing.T, name, mode string, urls pgtest.URLs, env ...string) *proc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	logFile := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logFile)
	require.NoError(t, err)
	cmd := exec.Command(binary(t), "--mode", mode, "--http-addr", addr)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+urls.EventStore, "READMODEL_DATABASE_URL="+urls.ReadModel, "MASTER_KEY="+masterKey,
		"POLL_INTERVAL=20ms", "LOG_LEVEL=info", "SHUTDOWN_TIMEOUT=5s")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = f
	require.NoError(t, cmd.Start())
	p := &proc{name: name, cmd: cmd, addr: addr, log: logFile, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			out, _ := os.ReadFile(logFile)
			t.Logf("--- %s log (last 6000 bytes) ---\n%s", name, tail(out, 6000))
		}
	})
	return p
}

// awaitReady waits until p answers /readyz and /metrics.
func (p *proc) awaitReady(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { _, ok := p.ready(); return ok }, 60*time.Second, 20*time.Millisecond, "%s ready", p.name)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig), "signal %s %v", p.name, sig)
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stopped reports whether every thread of the process is stopped (state T
// in /proc). kill(SIGSTOP) returns before that: the kernel wakes one thread
// to begin the group stop, and the others run on, and may commit, until it
// has been scheduled and stopped them all, which on a loaded machine can
// take milliseconds.
func (p *proc) stopped() bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.cmd.Process.Pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", p.cmd.Process.Pid, task.Name()))
		if err != nil {
			return false
		}
		// "pid (comm) state ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false
		}
	}
	return true
}

// readiness is a process's leadership, as its /metrics report it (the
// details of /readyz are for admin keys): per projection, whether it leads
// it and under which term.
type readiness struct {
	Leads map[string]int64 // projection -> term, for the projections it leads
	Units int              // projection units it reports (0 in mode api)
	// AllUnits and Leading count every unit it reports and leads,
	// projections and the other leader-only work (webhook delivery) alike:
	// the fair share is of all of them.
	AllUnits, Leading int
	// Led is every unit it leads, by name, with its term.
	Led map[string]int64
}

// ready asks /readyz and /metrics; ok is false when the process does not
// answer 200 to both.
func (p *proc) ready() (readiness, bool) {
	r := readiness{Leads: map[string]int64{}, Led: map[string]int64{}}
	get := func(path string) (string, bool) {
		resp, err := client.Get("http://" + p.addr + path)
		if err != nil {
			return "", false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err == nil && resp.StatusCode == http.StatusOK
	}
	if _, ok := get("/readyz"); !ok {
		return r, false
	}
	metrics, ok := get("/metrics")
	if !ok {
		return r, false
	}
	terms := map[string]int64{}
	for _, line := range strings.Split(metrics, "\n") {
		series, value, _ := strings.Cut(line, " ")
		name, labels, _ := strings.Cut(series, "{")
		unit := strings.TrimSuffix(strings.TrimPrefix(labels, `unit="`), `"}`)
		switch name {
		case "hearth_leader_is_leader":
			r.AllUnits++
			if strings.HasPrefix(unit, advisory.Projection("")) {
				r.Units++
			}
			if value == "1" {
				r.Leading++
				r.Led[unit] = 0
			}
		case "hearth_leader_term":
			term, _ := strconv.ParseFloat(value, 64) // Prometheus' text format
			terms[unit] = int64(term)
		}
	}
	for unit := range r.Led {
		r.Led[unit] = terms[unit]
		if projection, isProjection := strings.CutPrefix(unit, advisory.Projection("")); isProjection {
			r.Leads[projection] = terms[unit]
		}
	}
	return r, true
}

// leaders returns, for each projection, the worker that leads it and its
// term, and whether every worker answered and every projection has exactly
// one leader; and, per worker, how many units it leads of how many.
func leaders(workers []*proc) (map[string]lead, map[*proc]readiness, bool) {
	out := map[string]lead{}
	all := map[*proc]readiness{}
	settled := true
	for _, w := range workers {
		r, ok := w.ready()
		if !ok || r.Units != len(aggregates.Projections()) {
			settled = false
			continue
		}
		all[w] = r
		for projection, term := range r.Leads {
			if _, twice := out[projection]; twice {
				settled = false
			}
			out[projection] = lead{w, term}
		}
	}
	return out, all, settled && len(out) == len(aggregates.Projections())
}

// lead is a projection's leader and its term.
type lead struct {
	proc *proc
	term int64
}

// call sends one JSON request with key and decodes the answer into out (if
// not nil). It never touches t, so writers and Eventually conditions can use it.
func call(method, url, key string, body, out any) (int, error) {
	buf, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(buf))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode < 300 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, err
		}
	}
	return resp.StatusCode, nil
}

// contains reports whether the log of p contains s.
func (p *proc) logContains(s string) bool {
	out, _ := os.ReadFile(p.log)
	return strings.Contains(string(out), s)
}
