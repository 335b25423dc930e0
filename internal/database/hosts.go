package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A URL that names several hosts (a Patroni cluster: host1:port1,host2:port2
// with target_session_attrs=read-write) is connected through one host at a
// time, in an order this process learns, instead of pgx's fixed order:
//
//   - the host the newest read-write connection reached (the primary, as
//     far as this process knows) is tried first;
//   - a host that failed to answer within its own bound (a connect timeout,
//     the bounded check of a pooled connection), or for probeTimeout
//     before the caller's deadline ended the attempt, is silent: it is tried
//     last, and for silentFor afterwards within probeTimeout only. A
//     frozen primary (its machine paused, its processes stopped: its
//     kernel still accepts connections, nothing answers them) then costs
//     a second per connection while the standby is promoted, not a
//     connect timeout, and nothing once it is;
//   - when no host accepts writes, the error (NoPrimaryError) says which
//     hosts were tried and what each answered.
//
// Every pool and session of the process on the same hosts shares what is
// learnt (hostSets). A pooled connection is checked against it before
// reuse (usable): one to a host found silent since it was opened, or to a
// host other than the newest primary, is dropped without carrying a
// statement, so that a write never goes to an old primary (a frozen one
// that resumed, and still accepts writes until Patroni demotes it) and
// the pool moves to the new one.
const silentFor = ConnectTimeout

// hostSet is what the process knows of the hosts of a multi-host URL.
type hostSet struct {
	mu      sync.Mutex
	primary string               // the host the newest read-write connection reached
	reached map[string]time.Time // host -> when a connection last reached it
	silent  map[string]time.Time // host -> when it last failed to answer in time
}

// hostSets holds a hostSet per set of hosts (their sorted addresses).
var hostSets sync.Map

// host is one host of a multi-host URL: its address, and a configuration
// naming it alone (with its TLS variants, sslmode=prefer's two attempts).
type host struct {
	addr string
	cfg  *pgx.ConnConfig
	pool driver.Connector // a pool's connector to this host alone
}

// splitHosts returns cfg's hosts, one configuration each, in the URL's
// order, and the set they share; nil when cfg names one host only.
func splitHosts(cfg *pgx.ConnConfig) ([]host, *hostSet) {
	all := append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...)
	var hosts []host
	for _, fb := range all {
		addr := fb.Host + ":" + strconv.Itoa(int(fb.Port))
		if n := len(hosts); n > 0 && hosts[n-1].addr == addr { // another TLS variant of the same host
			hosts[n-1].cfg.Fallbacks = append(hosts[n-1].cfg.Fallbacks, fb)
			continue
		}
		one := cfg.Copy()
		one.Host, one.Port, one.TLSConfig, one.Fallbacks = fb.Host, fb.Port, fb.TLSConfig, nil
		hosts = append(hosts, host{addr: addr, cfg: one})
	}
	if len(hosts) < 2 {
		return nil, nil
	}
	keys := make([]string, len(hosts))
	for i, h := range hosts {
		keys[i] = h.addr
	}
	slices.Sort(keys) // what is known of a host does not depend on the order a URL names it in
	s, _ := hostSets.LoadOrStore(strings.Join(keys, ","), &hostSet{reached: map[string]time.Time{}, silent: map[string]time.Time{}})
	return hosts, s.(*hostSet)
}

// attempt is a host to try, and the bound of the attempt (0: the
// configuration's connect timeout).
type attempt struct {
	host
	bound time.Duration
}

// order returns the hosts to try, best first: the newest primary, the
// others in the URL's order, then the silent ones; a host silent for less
// than silentFor is tried last and within probeTimeout only (a server
// that answers at all answers a connection in milliseconds), so a frozen
// primary costs little while the standby is promoted, and a primary
// marked silent by mistake (a check that ran late) is still reached.
func (s *hostSet) order(hosts []host, now time.Time) []attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first, rest, last, probe []attempt
	for _, h := range hosts {
		switch silentAt, ok := s.silent[h.addr]; {
		case ok && silentAt.After(s.reached[h.addr]) && now.Sub(silentAt) < silentFor:
			probe = append(probe, attempt{h, probeTimeout})
		case ok && silentAt.After(s.reached[h.addr]):
			last = append(last, attempt{h, 0})
		case h.addr == s.primary:
			first = append(first, attempt{h, 0})
		default:
			rest = append(rest, attempt{h, 0})
		}
	}
	return slices.Concat(first, rest, last, probe)
}

// probeTimeout bounds an attempt on a host found silent less than
// silentFor ago.
const probeTimeout = time.Second

// reachedPrimary records that a read-write connection reached addr.
func (s *hostSet) reachedPrimary(addr string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.primary = addr
	s.reached[addr] = at
}

// silence records that addr failed to answer within a bound of its own.
func (s *hostSet) silence(addr string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.silent[addr] = at
}

// usable reports whether a connection to addr opened at born may be
// reused: its host has not been silent since, and is still the newest
// primary this process reached.
func (s *hostSet) usable(addr string, born time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.silent[addr].After(born) {
		return false
	}
	return s.primary == "" || s.primary == addr
}

// NoPrimaryError is the failure to connect through a multi-host URL: no
// host accepted a read-write session. Answers says, per host, what it
// answered.
type NoPrimaryError struct {
	Answers []string
}

func (e *NoPrimaryError) Error() string {
	return "no primary among the hosts (" + strings.Join(e.Answers, "; ") + ")"
}

// DatabaseUnavailable marks the error as a failover under way rather than
// a fault: the HTTP port answers it 503 with Retry-After without knowing
// this package.
func (e *NoPrimaryError) DatabaseUnavailable() {}

// UnreachableError is a pool's failure to connect to the server of a
// one-host URL that is down, restarting, or not answering in time (behind
// a virtual IP or a proxy that follows a Patroni cluster's leader, a
// failover under way), rather than refusing the session itself (a wrong
// password, a missing database). Nothing was sent, so the work may be
// tried again as it is; like NoPrimaryError, the HTTP port answers it 503
// with Retry-After.
type UnreachableError struct{ err error }

func (e *UnreachableError) Error() string { return e.err.Error() }
func (e *UnreachableError) Unwrap() error { return e.err }

// DatabaseUnavailable marks the error as an outage rather than a fault
// (see NoPrimaryError's).
func (e *UnreachableError) DatabaseUnavailable() {}

// connectHosts connects through the first host of order that accepts a
// read-write session, with connect, and records what it learns in s.
func connectHosts[T any](ctx context.Context, s *hostSet, hosts []host, connect func(context.Context, host) (T, error)) (T, string, error) {
	var zero T
	var answers []string
	var errs []error
	for _, a := range s.order(hosts, time.Now()) {
		attemptCtx, cancel := ctx, context.CancelFunc(func() {})
		bound := a.cfg.ConnectTimeout
		if a.bound > 0 {
			attemptCtx, cancel = context.WithTimeout(ctx, a.bound)
			bound = a.bound
		}
		started := time.Now()
		c, err := connect(attemptCtx, a.host)
		cancel()
		if err == nil {
			s.reachedPrimary(a.addr, time.Now())
			return c, a.addr, nil
		}
		if ctx.Err() != nil {
			// The caller gave up. A host that had said nothing for
			// probeTimeout by then is silent all the same: otherwise a
			// caller whose deadline is shorter than the connect timeout
			// would try the same silent host first, and give up, forever.
			if timedOut(err) && time.Since(started) >= probeTimeout {
				s.silence(a.addr, time.Now())
			}
			return zero, "", err
		}
		if refused(err) { // no other host will think otherwise
			return zero, "", err
		}
		errs = append(errs, err)
		answers = append(answers, a.addr+": "+answer(err, bound))
		if timedOut(err) {
			s.silence(a.addr, time.Now())
		}
	}
	return zero, "", errors.Join(&NoPrimaryError{Answers: answers}, errors.Join(errs...))
}

// refused reports whether a server refused the session itself (a wrong
// password, a role without the right, a database that does not exist), as
// pgx stops at such an answer too.
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "28P01", "28000", "3D000", "42501":
		return true
	}
	return false
}

func timedOut(err error) bool {
	return pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded)
}

// answer says in a few words what a host answered.
func answer(err error, bound time.Duration) string {
	switch {
	case errors.Is(err, pgconn.ErrReadOnlyConnection), errors.Is(err, pgconn.ErrStandbyConnection):
		return "read-only (a standby, or a primary being demoted)"
	case timedOut(err):
		return fmt.Sprintf("no answer within %v", bound)
	}
	msg := err.Error()
	if _, after, ok := strings.Cut(msg, "): "); ok { // pgx: "failed to connect to `...`: addr (host): what"
		msg = after
	}
	return msg
}

// Connect is pgx.ConnectConfig for Hearth's dedicated sessions (leadership,
// LISTEN): through a multi-host URL it tries the hosts in the order this
// process learnt (see silentFor), and fails with a NoPrimaryError naming
// what each answered.
func Connect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	hosts, set := splitHosts(cfg)
	var conn *pgx.Conn
	var err error
	if hosts == nil {
		conn, err = pgx.ConnectConfig(ctx, cfg)
	} else {
		conn, _, err = connectHosts(ctx, set, hosts, func(ctx context.Context, h host) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, h.cfg)
		})
	}
	if err != nil {
		return nil, err
	}
	readInUTC(conn)
	return conn, nil
}

// Unavailable reports an error that says the database could not be reached
// or stopped serving (refused or lost connections, a server shutting down
// or starting, no primary during a failover), not that a statement was
// wrong: the same work may succeed once the database is back.
//
// A timeout is not: an event whose statement runs past its time on every
// attempt would otherwise hold its projection for ever instead of parking.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || // connection_exception
			pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" // admin or crash shutdown, cannot connect now
	}
	var netErr net.Error
	return errors.As(err, new(interface{ DatabaseUnavailable() })) || errors.As(err, new(*pgconn.ConnectError)) ||
		(errors.As(err, &netErr) && !netErr.Timeout()) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err)
}
