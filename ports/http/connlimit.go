package httpport

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// LimitConnections is the limit (problem member limit) of the connections
// one client address holds open at once.
const LimitConnections = "connections"

const (
	// refusing bounds the refused connections being answered at once:
	// beyond it a refused connection is closed without an answer, so that
	// a flood of them costs no more goroutines than this.
	refusing = 64
	// refuseFor bounds the answer of one refused connection, and the
	// reading of what its client sent meanwhile.
	refuseFor = time.Second
)

// LimitConnectionsPerAddress wraps the listener an http.Server serves so
// that one client address holds at most perAddress connections open at
// once. Every connection holds a file descriptor, a goroutine and its
// buffers, and a request that needs no key (/healthz) keeps it from going
// idle: without a cap one address could take every descriptor the process
// has, and then no other client could connect nor a database pool open a
// connection. The address is the TCP peer's (IPv6 per /64, as the budgets
// of unknown keys count it); X-Forwarded-For is not read yet when a
// connection opens, so a peer in trusted (TRUSTED_PROXIES), which carries
// many clients, is not capped. A connection over the cap is answered 429
// (limit connections, Retry-After) and closed, before its request is read.
// perAddress 0 turns the cap off. refused, if not nil, is told of each
// refused connection, answered or (past the refusals answered at once)
// closed without an answer: many clients behind one NAT look like one
// address, and the operator who sees them refused raises the cap or lists
// the address as a proxy.
func LimitConnectionsPerAddress(ln net.Listener, perAddress int, trusted []netip.Prefix, refused func(answered bool)) net.Listener {
	if perAddress <= 0 {
		return ln
	}
	if refused == nil {
		refused = func(bool) {}
	}
	return &cappedListener{Listener: ln, perAddress: perAddress, trusted: trusted, refused: refused,
		open: map[netip.Addr]int{}, refusing: make(chan struct{}, refusing)}
}

type cappedListener struct {
	net.Listener
	perAddress int
	trusted    []netip.Prefix
	refusing   chan struct{} // one token per refused connection being answered
	refused    func(answered bool)

	mu   sync.Mutex
	open map[netip.Addr]int // connections open per capped address
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := parseAddr(c.RemoteAddr().String())
		if !addr.IsValid() || l.isTrusted(addr) {
			return c, nil
		}
		if addr.Is6() {
			addr = netip.PrefixFrom(addr, 64).Masked().Addr()
		}
		l.mu.Lock()
		if l.open[addr] >= l.perAddress {
			l.mu.Unlock()
			l.refuse(c)
			continue
		}
		l.open[addr]++
		l.mu.Unlock()
		return &countedConn{Conn: c, done: sync.OnceFunc(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[addr]--; l.open[addr] == 0 {
				delete(l.open, addr)
			}
		})}, nil
	}
}

func (l *cappedListener) isTrusted(a netip.Addr) bool {
	for _, p := range l.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refuse answers a connection over the cap, apart from the accept loop,
// which goes on at once: 429, then the client's request read and dropped
// (closing with it unread would reset the connection, and the client might
// lose the answer), all within refuseFor.
func (l *cappedListener) refuse(c net.Conn) {
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = c.Close()
		l.refused(false)
		return
	}
	l.refused(true)
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseFor))
		if _, err := c.Write(l.refusal()); err != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// refusal is the answer to a connection over the cap.
func (l *cappedListener) refusal() []byte {
	p := newProblem(http.StatusTooManyRequests, "rate-limited", fmt.Sprintf(
		"this address has %d connections open to this server, the most it may; send on those, or close one first", l.perAddress))
	p.Limit = LimitConnections
	body, _ := json.Marshal(p)
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/problem+json\r\nCache-Control: no-store\r\n"+
		"X-Content-Type-Options: nosniff\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		http.StatusTooManyRequests, http.StatusText(http.StatusTooManyRequests), len(body), body)
}

// countedConn is a connection counted against its address until it is
// closed.
type countedConn struct {
	net.Conn
	done func()
}

func (c *countedConn) Close() error {
	c.done()
	return c.Conn.Close()
}

// CloseWrite half-closes the connection when the underlying one can
// (problemConn's, after a 431).
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
