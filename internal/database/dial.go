package database

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A server that goes silent (its machine frozen, a network partition) must
// be abandoned within a bounded time, or a failover of the database is an
// outage for as long as TCP keeps retrying (about 15 minutes with Linux's
// defaults): the pooled connections, the leadership sessions and the
// LISTEN session would all keep waiting on it. Every connection Hearth
// opens is dialled with:
//
//   - TCP keepalives, so an idle connection whose server went silent is
//     noticed: the first probe after KeepaliveIdle of silence, then one
//     every KeepaliveInterval;
//   - TCP_USER_TIMEOUT (Linux), so data sent and not acknowledged for
//     SilenceBound ends the connection, and, with keepalives on, so do
//     unanswered probes (tcp(7): the user timeout overrides the probe
//     count);
//   - a connect timeout per host (ConnectTimeout, unless the URL sets
//     connect_timeout), so a silent host of a multi-host URL is passed
//     over for the next one.
//
// These act on the network: a server process that is merely stopped on a
// machine that still runs (SIGSTOP) is answered for by its kernel, and only
// the callers' deadlines end the wait (every database call carries one, and
// the pool's check before reuse, checkTimeout, has its own).
const (
	// SilenceBound is how long a connection waits for its server's
	// machine to acknowledge what it sent before it gives up.
	SilenceBound = 10 * time.Second
	// KeepaliveIdle is the silence on an idle connection before the first
	// keepalive probe.
	KeepaliveIdle = 5 * time.Second
	// KeepaliveInterval is the time between probes.
	KeepaliveInterval = time.Second
	// ConnectTimeout bounds a connection attempt to one host, start-up and
	// authentication included, when the URL sets no connect_timeout.
	ConnectTimeout = 5 * time.Second
	// keepaliveCount probes go unanswered before the kernel ends the
	// connection; with TCP_USER_TIMEOUT set, SilenceBound decides first.
	keepaliveCount = 5
)

// ParseConfig is pgx.ParseConfig with Hearth's connection settings
// (Harden). url may name several hosts (host1:port1,host2:port2): a
// connection keeps only one that accepts writes (hosts.go says in which
// order they are tried), as target_session_attrs=read-write asks, also
// when the URL leaves target_session_attrs out or says any. Every Hearth
// connection writes, or takes locks only the primary's count for; with
// pgx's default (libpq's any) it would keep the first host that answers,
// a standby, or after a failover the old primary restarted as one, and
// every write would fail until the URL was fixed. A URL that asks for
// another kind of host (read-only, standby) gets what it asks for.
func ParseConfig(url string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	Harden(cfg)
	// Every session runs in UTC, whatever the server's or the URL's zone:
	// Watermill's topic tables stamp created_at as a timestamp without
	// zone in the session's zone, and the lag and retention ages subtract
	// it from now() in the same zone, which a daylight-saving change would
	// shift by an hour. No statement of Hearth's depends on the session's
	// zone otherwise (local dates are the domain's, in Go).
	cfg.RuntimeParams["timezone"] = "UTC"
	if cfg.ValidateConnect == nil && severalHosts(cfg) {
		cfg.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
	}
	return cfg, nil
}

// severalHosts reports whether cfg names more than one host (the TLS
// variants of one host, sslmode=prefer's two attempts, are one).
func severalHosts(cfg *pgx.ConnConfig) bool {
	for _, fb := range cfg.Fallbacks {
		if fb.Host != cfg.Host || fb.Port != cfg.Port {
			return true
		}
	}
	return false
}

// Harden makes cfg dial with keepalives, the user timeout and a connect
// timeout (see SilenceBound). Every host of a multi-host URL goes through
// the same dialler (pgx's fallbacks share cfg.DialFunc).
func Harden(cfg *pgx.ConnConfig) {
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, ConnectTimeout)
	d := &net.Dialer{
		Timeout: cfg.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     KeepaliveIdle,
			Interval: KeepaliveInterval,
			Count:    keepaliveCount,
		},
		Control: setUserTimeout,
	}
	cfg.DialFunc = d.DialContext
}

// tcpUserTimeout is Linux's TCP_USER_TIMEOUT socket option, which package
// syscall does not name.
const tcpUserTimeout = 0x12

// setUserTimeout sets TCP_USER_TIMEOUT on a TCP socket before it connects;
// a Unix socket has no such option, and needs none.
func setUserTimeout(network, _ string, c syscall.RawConn) error {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil
	}
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(SilenceBound.Milliseconds()))
	})
	if err = cmp.Or(err, serr); err != nil {
		return fmt.Errorf("set TCP_USER_TIMEOUT: %w", err)
	}
	return nil
}

// checkTimeout bounds the check of a pooled connection before it is reused
// (a ping, when it sat idle; stdlib's default policy), whatever the
// caller's deadline: a connection to a server that stopped answering is
// dropped, and the pool dials again, which the connect timeout bounds.
const checkTimeout = 2 * time.Second

func boundedCheck(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, checkTimeout)
}
