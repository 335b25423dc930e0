package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// operations.md, Database connections and failover: through a one-host URL
// (a virtual IP, or a proxy that follows Patroni's leader, which "works as
// well"), an instance started while its server does not answer (a failover
// under way, the proxy without a backend, Postgres restarting) waits for it
// with backoff, as it does through a multi-host URL, rather than exiting at
// once: a supervisor's growing restart backoff would keep it down long
// after the database is back.
func TestServeWaitsForTheServerOfAOneHostURL(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	live := fmt.Sprintf("127.0.0.1:%d", cfg.Port)

	// A proxy in front of Postgres that has no backend yet: like HAProxy,
	// it accepts each connection and closes it (counted: one a connection
	// attempt, the URL says sslmode=disable).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var backend atomic.Bool
	var attempts atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !backend.Load() {
				attempts.Add(1)
				_ = c.Close()
				continue
			}
			go forward(c, live)
		}
	}()
	viaProxy := strings.Replace(url, live, ln.Addr().String(), 1)
	require.NotEqual(t, url, viaProxy)

	vars := map[string]string{"DATABASE_URL": viaProxy, "LOG_FORMAT": "json", "MASTER_KEY": testMasterKey, "SHUTDOWN_TIMEOUT": "5s"}
	stderr := &syncBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--http-addr", "127.0.0.1:0"}, env(vars), io.Discard, stderr)
	}()
	var exitErr error
	exited := false
	wait := func() {
		if !exited {
			exitErr, exited = <-done, true
		}
	}
	t.Cleanup(func() { stop(); wait() })

	// serve tries again, and again, rather than exit.
	require.Eventually(t, func() bool {
		select {
		case exitErr = <-done:
			exited = true
			return true
		default:
		}
		return attempts.Load() >= 3
	}, time.Minute, 10*time.Millisecond, "serve tries the server again")
	require.False(t, exited, "serve exits while the server of its one-host URL is unreachable: %v", exitErr)

	// The proxy gets its backend (the failover is over): serve starts.
	backend.Store(true)
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), `"msg":"hearth started"`) },
		time.Minute, 10*time.Millisecond, "serve starts once the server answers: %s", stderr)
	stop()
	wait()
	require.NoError(t, exitErr, "serve stops cleanly")
}

// forward passes c on to addr, as a TCP proxy in front of Postgres does.
func forward(c net.Conn, addr string) {
	defer c.Close()
	s, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
	_, _ = io.Copy(c, s)
}
