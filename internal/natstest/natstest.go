// Package natstest gives tests a real NATS server with JetStream: a
// throwaway nats-server per test, on a free port of 127.0.0.1 with a
// temporary store, stopped (and its store removed) when the test ends. Like
// internal/pgtest, it installs Debian's nats-server package when it is
// missing and the tests run as root; .ci/run installs it too.
package natstest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"hearth/internal/natsserver"
)

// Start starts a server for t and stops it when t ends. Restart, Halt and
// Resume on the result keep its port and store.
func Start(t testing.TB) *natsserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := natsserver.Start(ctx, natsserver.Options{Install: true,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("natstest: stop: %v", err)
		}
	})
	return s
}
