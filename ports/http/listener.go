package httpport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Listener wraps the listener an http.Server serves so that the few answers
// net/http writes before any handler runs are problem+json too, as the API
// promises for every error.
//
// net/http answers a request it cannot read (headers over
// http.Server.MaxHeaderBytes: 431; a malformed request line or header: 400;
// an unsupported transfer coding: 501) by writing a fixed text/plain
// response straight to the connection, in one write, then closing it, and
// an Expect other than 100-continue with a bare 417 (expectationFailed); no
// handler, middleware or hook sees that request. Listener's connections
// recognise exactly those writes (the status line followed by net/http's
// fixed "text/plain ... Connection: close" headers) and send the same
// status as a problem instead. maxHeaderBytes is the server's
// MaxHeaderBytes, for the 431's detail.
func Listener(ln net.Listener, maxHeaderBytes int) net.Listener {
	return &problemListener{Listener: ln, maxHeaderBytes: maxHeaderBytes}
}

type problemListener struct {
	net.Listener
	maxHeaderBytes int
}

func (l *problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c, maxHeaderBytes: l.maxHeaderBytes}, nil
}

type problemConn struct {
	net.Conn
	maxHeaderBytes int
}

// CloseWrite half-closes the connection when the underlying one can:
// net/http does so after a 431, so that the client reads the answer before
// the unread rest of its request resets the connection.
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// serverErrorHeaders is what net/http (server.go, conn.serve) writes between
// the status line and the body of an answer to a request it could not read.
const serverErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *problemConn) Write(p []byte) (int, error) {
	answer, ok := c.asProblem(p)
	if !ok {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(answer); err != nil {
		return 0, err
	}
	return len(p), nil
}

// expectationFailed is how net/http (server.go, response.sendExpectationFailed)
// begins and ends its answer to an Expect other than 100-continue, before
// any handler runs: a bare 417 whose only other header is the Date between.
const (
	expectationFailedHead = "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: "
	expectationFailedTail = "\r\nContent-Length: 0\r\n\r\n"
)

// asProblem is p as a problem+json answer when p is one of net/http's own
// answers to an unreadable request.
func (c *problemConn) asProblem(p []byte) ([]byte, bool) {
	if date, ok := bytes.CutPrefix(p, []byte(expectationFailedHead)); ok && bytes.HasSuffix(date, []byte(expectationFailedTail)) &&
		len(date) == len(http.TimeFormat)+len(expectationFailedTail) {
		return answerProblem(newProblem(http.StatusExpectationFailed, "malformed-request",
			"the request's Expect header asks for what the server does not do: only 100-continue is known; send the request without it"))
	}
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 3 {
		return nil, false
	}
	statusLine, text, ok := bytes.Cut(rest, []byte(serverErrorHeaders))
	if !ok {
		return nil, false
	}
	status, err := strconv.Atoi(string(statusLine[:3]))
	if err != nil || status < 400 {
		return nil, false
	}
	// The body is the status and its text, then may say why after a colon
	// (net/http puts that reason in the status line too).
	reason := strings.TrimPrefix(strings.TrimPrefix(string(text), fmt.Sprintf("%d %s", status, http.StatusText(status))), ": ")
	var pr problem
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		pr = newProblem(status, "headers-too-large",
			fmt.Sprintf("the request line and headers are larger than %d bytes", c.maxHeaderBytes))
	case http.StatusNotImplemented:
		pr = newProblem(status, "not-implemented", strings.ToLower(reason))
	default:
		pr = newProblem(status, "malformed-request", strings.TrimSuffix("the request could not be read as HTTP/1.1: "+reason, ": "))
	}
	return answerProblem(pr)
}

// answerProblem is the raw answer of pr on a connection that closes after it.
func answerProblem(pr problem) ([]byte, bool) {
	body, err := json.Marshal(pr)
	if err != nil {
		return nil, false
	}
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/problem+json\r\nX-Content-Type-Options: nosniff\r\n"+
		"Connection: close\r\nContent-Length: %d\r\n\r\n%s", pr.Status, http.StatusText(pr.Status), len(body), body), true
}
