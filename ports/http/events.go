package httpport

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"hearth/app/query"
)

// listEvents serves GET /v1/events: the key's merchant's events after the
// cursor `after`, in commit order (query.Feed), waiting up to `wait` (at
// most FeedWait) for the first when there is none. At most FeedMaxWaits
// requests wait at once; over the cap a request answers at once, and 503
// when it has nothing, so that a client does not turn a busy server's empty
// answers into a loop of requests.
func (s *server) listEvents(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	after, err := query.ParseFeedCursor(p.one("after"))
	if err != nil {
		p.fail("after", "%v, got %q", err, p.v.Get("after"))
	}
	req := query.FeedRequest{After: after, Types: p.eventTypes("types"), Limit: p.int("limit", query.FeedLimit, 1, query.FeedMaxLimit),
		Wait: min(p.duration("wait", s.FeedWait), s.FeedWait), Stop: s.Draining}
	if p.err != nil {
		return p.err
	}
	busy := false
	if req.Wait > 0 {
		select {
		case s.feedWaits <- struct{}{}:
			defer func() { <-s.feedWaits }()
		default:
			req.Wait, busy = 0, true
		}
	}
	page, err := s.App.Queries.Events.Read(r.Context(), principal(r).MerchantID, req)
	if errors.Is(err, query.ErrUnknownCursor) {
		p.fail("after", "%v", err)
		return p.err
	}
	if err != nil {
		return err
	}
	if req.Wait > 0 && !s.keyStillWorks(w, r) {
		return nil // answered: the key stopped working while the poll waited
	}
	if busy && len(page.Events) == 0 {
		w.Header().Set("Retry-After", "1")
		return errTooManyFeedWaits
	}
	writeJSON(w, http.StatusOK, eventListBodyOf(page))
	return nil
}

// errTooManyFeedWaits is a long poll over FeedMaxWaits that found nothing.
var errTooManyFeedWaits = errors.New("too many long polls of the event feed wait on this server; try again shortly")

// eventTypes reads the types parameter: public event types of the feed
// (query.FeedTypes), separated by commas; the parameter may repeat.
func (p *params) eventTypes(name string) []string {
	var out []string
	allowed := query.FeedTypes()
	for _, v := range p.v[name] {
		for t := range strings.SplitSeq(v, ",") {
			switch {
			case !slices.Contains(allowed, t):
				p.fail(name, "must be event types separated by commas, each one of %s; got %q", strings.Join(allowed, ", "), t)
			case !slices.Contains(out, t):
				out = append(out, t)
			}
		}
	}
	return out
}

// duration reads a Go duration of 0 or more (such as 500ms or 20s).
func (p *params) duration(name string, def time.Duration) time.Duration {
	s := p.one(name)
	if s == "" && !p.v.Has(name) { // given empty: refused, as int's are
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		p.fail(name, "must be a Go duration of 0 or more, such as 500ms or 20s, got %q", s)
		return def
	}
	return d
}
