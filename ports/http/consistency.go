package httpport

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// Consistency waits until the read models reflect the write that returned
// position (see readmodel.Positions), or ctx ends; it reports whether they
// do.
type Consistency interface {
	Wait(ctx context.Context, position int64) (bool, error)
}

// Read-your-writes headers.
const (
	// HeaderPosition carries a write's position in its response, and asks a
	// GET to wait for it (as does the min_position parameter).
	HeaderPosition = "Consistency-Position"
	// HeaderTimeout shortens the wait of one GET (a Go duration such as
	// 500ms); it cannot exceed Config.ConsistencyTimeout.
	HeaderTimeout = "Consistency-Timeout"
	// HeaderStatus answers "reached" or "timeout" (the answer is then what
	// the read models had when the wait ended).
	HeaderStatus = "Consistency-Status"
)

// awaitPosition makes a GET that names a position wait, bounded, until the
// read models have reached it. It reports false when it has answered the
// request itself (a malformed position).
func (s *server) awaitPosition(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet || s.Consistency == nil {
		return true
	}
	raw, name := r.Header.Get(HeaderPosition), HeaderPosition
	if raw == "" {
		raw, name = r.URL.Query().Get("min_position"), "min_position"
	}
	if raw == "" {
		return true
	}
	pos, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || pos <= 0 {
		s.writeError(w, r, malformed(name, "must be a positive integer (the position a write returned), got %q", raw))
		return false
	}
	timeout := s.ConsistencyTimeout
	if h := r.Header.Get(HeaderTimeout); h != "" {
		d, err := time.ParseDuration(h)
		if err != nil || d < 0 {
			s.writeError(w, r, malformed(HeaderTimeout, "must be a Go duration such as 500ms, got %q", h))
			return false
		}
		timeout = min(d, timeout)
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	reached, err := s.Consistency.Wait(ctx, pos)
	if err != nil {
		s.writeError(w, r, err)
		return false
	}
	if reached {
		w.Header().Set(HeaderStatus, "reached")
	} else {
		w.Header().Set(HeaderStatus, "timeout")
	}
	return true
}
