package httpport

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"hearth/domain/apperr"
)

// Consistency waits until the read models reflect the write that returned
// position (see readmodel.Positions), or ctx ends; it reports whether they
// do. A position that is not one of the merchant's events is
// apperr.ErrNotFound, whether another merchant's or none at all.
type Consistency interface {
	Wait(ctx context.Context, merchantID string, position int64) (bool, error)
}

// ReadRouter sends a GET's reads to a read replica or the primary: Route
// returns the request's context naming the servers, which the read models
// built on the replicas follow. With replicas, Consistency waits on the
// replica the context names, and moves the read to the primary when the
// replica does not show the write in time.
type ReadRouter interface {
	Route(ctx context.Context) context.Context
}

// Read-your-writes headers.
const (
	// HeaderPosition carries a write's position in its response, and asks a
	// GET to wait for it (as does the min_position parameter).
	HeaderPosition = "Consistency-Position"
	// HeaderTimeout shortens the wait of one GET (a Go duration such as
	// 500ms); it cannot exceed Config.ConsistencyTimeout.
	HeaderTimeout = "Consistency-Timeout"
	// HeaderStatus answers "reached", "timeout" (the answer is then what
	// the read models had when the wait ended) or "skipped" (too many waits
	// in flight: the answer is what the primary's read models have now).
	HeaderStatus = "Consistency-Status"
)

// awaitPosition makes a GET that names a position wait, bounded, until the
// read models have reached it. It reports false when it has answered the
// request itself (a malformed position, or one that is not the caller's
// merchant's: 422, the same for another merchant's position and for one
// that names no event, so nothing about other merchants shows; 401 for a
// key that stopped working while the request waited). At most
// ConsistencyMaxWaits wait at once; over the cap a GET answers at once,
// with Consistency-Status: skipped, and the position is not looked up.
//
// A HEAD waits as its GET does: it answers the same headers (the ETag a
// client checks after its write). A position given empty is refused like
// any other that is no positive integer: read as absent, the answer would
// not have waited, and look as if it had.
func (s *server) awaitPosition(w http.ResponseWriter, r *http.Request) bool {
	if (r.Method != http.MethodGet && r.Method != http.MethodHead) || s.Consistency == nil {
		return true
	}
	raw, name := r.Header.Get(HeaderPosition), HeaderPosition
	given := len(r.Header.Values(HeaderPosition)) > 0
	if q := r.URL.Query()["min_position"]; len(q) > 0 {
		if given || len(q) > 1 { // one position, said once: not two to choose from
			s.writeError(w, r, malformed("min_position", "must be given once, and not with the %s header", HeaderPosition))
			return false
		}
		raw, name, given = q[0], "min_position", true
	}
	if !given {
		return true
	}
	pos, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || pos <= 0 {
		s.writeError(w, r, malformed(name, "must be a positive integer (the position a write returned), got %q", raw))
		return false
	}
	timeout := s.ConsistencyTimeout
	if len(r.Header.Values(HeaderTimeout)) > 0 { // an empty one too: the client meant a bound
		h := r.Header.Get(HeaderTimeout)
		d, err := time.ParseDuration(h)
		if err != nil || d < 0 {
			s.writeError(w, r, malformed(HeaderTimeout, "must be a Go duration such as 500ms, got %q", h))
			return false
		}
		timeout = min(d, timeout)
	}
	select {
	case s.waits <- struct{}{}:
		defer func() { <-s.waits }()
	default:
		// Not waited for, it reads what the primary has now: a replica
		// (read routing) may lag seconds behind.
		if p, ok := s.Consistency.(interface{ Primary(context.Context) }); ok {
			p.Primary(r.Context())
		}
		w.Header().Set(HeaderStatus, "skipped")
		return true
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	reached, err := s.Consistency.Wait(ctx, principal(r).MerchantID, pos)
	if errors.Is(err, apperr.ErrNotFound) {
		s.writeError(w, r, apperr.Invalid(name, "is not the position of a write of this merchant"))
		return false
	}
	if err != nil {
		s.writeError(w, r, err)
		return false
	}
	// The key was resolved when the request came in; one revoked while it
	// waited reads nothing now (keyStillWorks).
	if !s.keyStillWorks(w, r) {
		return false
	}
	if reached {
		w.Header().Set(HeaderStatus, "reached")
	} else {
		w.Header().Set(HeaderStatus, "timeout")
	}
	return true
}
