package httpport

import (
	"bufio"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeListener hands out the server ends of pipes whose peer address the
// test names.
type fakeListener struct{ conns chan net.Conn }

func (l *fakeListener) Accept() (net.Conn, error) {
	c, ok := <-l.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (l *fakeListener) Close() error   { return nil }
func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

type peerConn struct {
	net.Conn
	peer net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.peer }

// An IPv6 client counts per /64, as the budgets of unknown keys count it:
// another address of the same /64 is the same client, one of another /64
// is not. A connection closed twice is counted free once.
func TestConnectionsCountPerIPv6Slash64(t *testing.T) {
	t.Parallel()
	fake := &fakeListener{conns: make(chan net.Conn, 1)}
	ln := LimitConnectionsPerAddress(fake, 1, []netip.Prefix{netip.MustParsePrefix("2001:db8:ffff::/48")}, nil)
	accepted := make(chan net.Conn, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() { close(fake.conns) })
	// open offers a connection from ip; it reports the accepted end, or nil
	// and the answer when it was refused.
	open := func(ip string) (net.Conn, *http.Response) {
		server, client := net.Pipe()
		t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
		require.NoError(t, client.SetDeadline(time.Now().Add(10*time.Second)))
		fake.conns <- peerConn{Conn: server, peer: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1234}}
		answered := make(chan *http.Response, 1)
		go func() {
			res, err := http.ReadResponse(bufio.NewReader(client), nil)
			if err == nil {
				answered <- res
			}
		}()
		select {
		case c := <-accepted:
			return c, nil
		case res := <-answered:
			return nil, res
		case <-time.After(10 * time.Second):
			t.Fatal("neither accepted nor refused")
		}
		return nil, nil
	}
	first, _ := open("2001:db8::1")
	require.NotNil(t, first)
	_, res := open("2001:db8::2")
	require.NotNil(t, res, "the same /64 is the same client")
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	require.Equal(t, "1", res.Header.Get("Retry-After"))
	other, _ := open("2001:db8:0:1::1")
	require.NotNil(t, other, "another /64 is another client")
	for range 2 {
		trusted, _ := open("2001:db8:ffff::7")
		require.NotNil(t, trusted, "a trusted proxy is not capped")
	}

	require.NoError(t, first.Close())
	require.NoError(t, first.Close())
	again, _ := open("2001:db8::3")
	require.NotNil(t, again, "its connection closed, the /64 may open another")
	_, res = open("2001:db8::4")
	require.NotNil(t, res, "closed twice, counted free once")
}
