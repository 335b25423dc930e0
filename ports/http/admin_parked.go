package httpport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"hearth/app/ops"
	"hearth/domain/apperr"
)

// ParkedAggregates is the operator's use cases of parked aggregates
// (ops.Operator). Replay and Skip are recorded in the audit log, in their
// transaction, as done by the actor.
type ParkedAggregates interface {
	ListParked(ctx context.Context, projection string) ([]ops.ParkedAggregate, error)
	GetParked(ctx context.Context, projection, streamID string) (ops.ParkedAggregate, error)
	IsParked(ctx context.Context, projection, merchantID, streamID string) (ops.ParkedAggregate, bool, error)
	Replay(ctx context.Context, projection, streamID, actor string) (ops.ReplayResult, error)
	ReplayAll(ctx context.Context, projection, actor string) ([]ops.ReplayResult, error)
	Skip(ctx context.Context, s ops.Skip) (ops.SkipResult, error)
}

// ProjectionRebuilds is the operator's use cases of projection rebuilds
// in the background (ops.Operator). Start and cancel are recorded in the
// audit log as done by the actor.
type ProjectionRebuilds interface {
	StartRebuild(ctx context.Context, projection, actor string) (ops.RebuildProgress, error)
	RebuildStatus(projection string) (ops.RebuildProgress, error)
	CancelRebuild(ctx context.Context, projection, actor string) (ops.RebuildProgress, error)
}

// ParkedHeader is set on a detail answer whose row is held behind a parked
// event: "waiting=N, first_version=V, since=RFC 3339".
const ParkedHeader = "Projection-Parked"

// parkedProjection reads the projection parameter of the parked lists: absent
// is every projection; given, it must name one. Given empty (a script
// whose variable was empty) it is refused rather than read as absent,
// which would replay every projection's parked aggregates.
func parkedProjection(r *http.Request) (string, error) {
	p := newParams(r)
	projection := p.one("projection")
	if projection == "" && p.v.Has("projection") {
		p.fail("projection", "must name a projection when given; leave it out for every projection")
	}
	return projection, p.err
}

func (s *server) listParked(w http.ResponseWriter, r *http.Request) error {
	projection, err := parkedProjection(r)
	if err != nil {
		return err
	}
	list, err := s.Parked.ListParked(r.Context(), projection)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": mapAll(list, ParkedBodyOf), "total": len(list)})
	return nil
}

func (s *server) getParked(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	a, err := s.Parked.GetParked(r.Context(), r.PathValue("projection"), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ParkedBodyOf(a))
	return nil
}

func (s *server) replayParked(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := noBody(r); err != nil {
		return err
	}
	res, err := s.Parked.Replay(r.Context(), r.PathValue("projection"), id, principal(r).Subject())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, replayBodyOf(res))
	return nil
}

func (s *server) replayAllParked(w http.ResponseWriter, r *http.Request) error {
	projection, err := parkedProjection(r)
	if err != nil {
		return err
	}
	if err := noBody(r); err != nil {
		return err
	}
	res, err := s.Parked.ReplayAll(r.Context(), projection, principal(r).Subject())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": mapAll(res, replayBodyOf), "total": len(res)})
	return nil
}

type skipInput struct {
	EventID string `json:"event_id"`
	Reason  string `json:"reason" text:"multiline"`
}

func (s *server) skipParked(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var in skipInput
	if err := decode(r, &in); err != nil {
		return err
	}
	res, err := s.Parked.Skip(r.Context(), ops.Skip{Projection: r.PathValue("projection"), StreamID: id,
		EventID: in.EventID, By: principal(r).Subject(), Reason: in.Reason})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, skipBodyOf(res))
	return nil
}

func (s *server) startRebuild(w http.ResponseWriter, r *http.Request) error {
	if err := noBody(r); err != nil {
		return err
	}
	p, err := s.Rebuilds.StartRebuild(r.Context(), r.PathValue("projection"), principal(r).Subject())
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/admin/rebuilds/"+p.Projection)
	writeJSON(w, http.StatusAccepted, rebuildBodyOf(p))
	return nil
}

func (s *server) rebuildStatus(w http.ResponseWriter, r *http.Request) error {
	p, err := s.Rebuilds.RebuildStatus(r.PathValue("projection"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rebuildBodyOf(p))
	return nil
}

func (s *server) cancelRebuild(w http.ResponseWriter, r *http.Request) error {
	if err := noBody(r); err != nil {
		return err
	}
	p, err := s.Rebuilds.CancelRebuild(r.Context(), r.PathValue("projection"), principal(r).Subject())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rebuildBodyOf(p))
	return nil
}

// parkedHeader wraps a detail handler: when the merchant's row is held
// behind a parked event, a successful answer carries ParkedHeader, so a
// client can tell that the row is behind its events. So does the 404 of an
// aggregate parked at its first event, which has no row yet: the client
// its creation answered must not take it for lost and create it again.
// IsParked looks only at the key's merchant, so another merchant's 404
// says nothing. Nor does a worker key's: it sees only its staff member's
// rows, and its 404 stands as well for another staff member's order or
// schedule, which it must not learn of (the header would say it exists,
// and how its events wait); a worker creates no order or schedule, so it
// has no creation to take for lost.
func (s *server) parkedHeader(projection string, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.Parked == nil {
			return h(w, r)
		}
		id, err := pathID(r)
		if err != nil {
			return h(w, r)
		}
		a, parked, err := s.Parked.IsParked(r.Context(), projection, principal(r).MerchantID, id)
		if err != nil {
			s.log.WarnContext(r.Context(), "parked check failed", "projection", projection, "id", id, "error", err)
		}
		if !parked {
			return h(w, r)
		}
		value := fmt.Sprintf("waiting=%d, first_version=%d, since=%s", a.Waiting, a.FirstVersion, a.Since.UTC().Format(time.RFC3339))
		err = h(&headerOnOK{ResponseWriter: w, name: ParkedHeader, value: value}, r)
		if errors.Is(err, apperr.ErrNotFound) && scope(r).StaffID == "" {
			w.Header().Set(ParkedHeader, value) // answered by the caller, on w
		}
		return err
	}
}

// headerOnOK sets one header when the answer is 200.
type headerOnOK struct {
	http.ResponseWriter
	name, value string
	wrote       bool
}

func (w *headerOnOK) WriteHeader(code int) {
	if !w.wrote && code == http.StatusOK {
		w.Header().Set(w.name, w.value)
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *headerOnOK) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}
