package httpport

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
)

// answerer answers one kind of write. With an Idempotency-Key, the store
// renders the answer inside the write's transaction (seal) and stores it
// there; reply then sends exactly that answer. Without one, reply renders
// it after the write.
type answerer[R any] struct {
	// pick turns what the store wrote (a command.Outcome, or a reference
	// record) into what render takes.
	pick   func(result any) (R, error)
	render func(ctx context.Context, result R) (command.Answer, error)
	// secretOf, when set, marks an answer that shows a secret once (a
	// webhook endpoint's signing secret) and names the resource whose
	// secret it is. What is stored for a retry with the key is then the
	// problem secretShownOnce, not the answer: a stored secret would sit in
	// the records for IDEMPOTENCY_KEEP and be replayed after a rotation.
	secretOf func(result R) (path string)
}

// seal returns the context to run the write in: the request's, with the
// idempotent attempt (if any) told how to render the answer.
func (a answerer[R]) seal(r *http.Request) context.Context {
	if i := idempotentOf(r); i != nil {
		i.Render = func(ctx context.Context, result any) (command.Answer, error) {
			picked, err := a.pick(result)
			if err != nil {
				return command.Answer{}, err
			}
			ans, err := a.render(ctx, picked)
			if err != nil || a.secretOf == nil {
				return ans, err
			}
			replay, err := secretShownOnce(a.secretOf(picked))
			ans.Replay = &replay
			return ans, err
		}
	}
	return r.Context()
}

// reply sends the answer of a write that succeeded with result.
func (a answerer[R]) reply(w http.ResponseWriter, r *http.Request, result R) error {
	if i := idempotentOf(r); i != nil && i.Answered() != nil {
		writeAnswer(w, *i.Answered())
		return nil
	}
	ans, err := a.render(r.Context(), result)
	if err != nil {
		return err
	}
	writeAnswer(w, ans)
	return nil
}

// writtenAnswerer answers an event-sourced write with the resource of type
// V as the command left it (folded from its events, so it is exact before
// the read model catches up) and the position a later read can ask to see
// (Consistency-Position). named joins the reference names into the view.
func writtenAnswerer[V any, P interface {
	*V
	Apply(event.Recorded) error
}, B any](streamType string, status int, location string, named func(ctx context.Context, v V, names map[string]string) (V, error),
	body func(V) B) answerer[command.Written] {
	return answerer[command.Written]{
		pick: func(result any) (command.Written, error) {
			out, ok := result.(command.Outcome)
			if !ok {
				return command.Written{}, fmt.Errorf("answer of a %s write: got a %T, not an outcome", streamType, result)
			}
			w, found := out.OfType(streamType)
			if !found {
				return command.Written{}, fmt.Errorf("answer of a %s write: the outcome has no single %s", streamType, streamType)
			}
			return w, nil
		},
		render: func(ctx context.Context, out command.Written) (command.Answer, error) {
			view, err := query.Fold[V, P](out.Stream)
			if err != nil {
				return command.Answer{}, err
			}
			if view, err = named(ctx, view, out.Names); err != nil {
				return command.Answer{}, err
			}
			pos := strconv.FormatInt(out.Position, 10)
			header := map[string]string{HeaderPosition: pos, "ETag": etag(len(out.Stream))}
			if status == http.StatusCreated {
				header["Location"] = location + "/" + idOf(out)
			}
			body, err := withPosition(body(view), out.Position)
			if err != nil {
				return command.Answer{}, err
			}
			return jsonAnswer(status, body, header)
		},
	}
}

func (s *server) orderAnswer(r *http.Request, status int) answerer[command.Written] {
	return writtenAnswerer[query.Order](order.StreamType, status, "/v1/orders",
		func(ctx context.Context, v query.Order, names map[string]string) (query.Order, error) {
			return s.App.Queries.Orders.Named(ctx, scope(r), v, names)
		}, orderBodyOf)
}

func (s *server) requestAnswer(r *http.Request, status int) answerer[command.Written] {
	return writtenAnswerer[query.ServiceRequest](servicerequest.StreamType, status, "/v1/service-requests",
		func(ctx context.Context, v query.ServiceRequest, names map[string]string) (query.ServiceRequest, error) {
			return s.App.Queries.ServiceRequests.Named(ctx, scope(r), v, names)
		}, serviceRequestBodyOf)
}

func (s *server) scheduleAnswer(r *http.Request) answerer[command.Written] {
	return writtenAnswerer[query.Schedule](schedule.StreamType, http.StatusOK, "/v1/schedules",
		func(ctx context.Context, v query.Schedule, names map[string]string) (query.Schedule, error) {
			return s.App.Queries.Schedules.Named(ctx, scope(r), v, names)
		}, scheduleBodyOf)
}

// recordAnswerer answers a reference-record write with the record, as body
// shows it.
func recordAnswerer[T, B any](status int, location func(*T) string, body func(T) B) answerer[*T] {
	return answerer[*T]{
		pick: pickRecord[T],
		render: func(_ context.Context, v *T) (command.Answer, error) {
			var header map[string]string
			if location != nil {
				header = map[string]string{"Location": location(v)}
			}
			return jsonAnswer(status, body(*v), header)
		},
	}
}

// pickRecord is the pick of an answerer whose store writes a record and
// renders the answer from a pointer to it.
func pickRecord[T any](result any) (*T, error) {
	v, ok := result.(*T)
	if !ok {
		return nil, fmt.Errorf("answer of a record write: got a %T, not a %T", result, v)
	}
	return v, nil
}

func idOf(out command.Written) string {
	if len(out.Stream) == 0 {
		return ""
	}
	return out.Stream[0].StreamID
}

// withPosition is the view's JSON object with "position" added, a JSON
// integer like the events' position (the event feed, webhooks, the relay).
func withPosition(view any, pos int64) (json.RawMessage, error) {
	b, err := json.Marshal(view)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("view %T does not encode as a JSON object", view)
	}
	b = b[:len(b)-1]
	if len(b) > 1 {
		b = append(b, ',')
	}
	b = append(b, `"position":`...)
	b = strconv.AppendInt(b, pos, 10)
	return append(b, '}'), nil
}

// jsonAnswer is a JSON answer, encoded as writeJSON encodes it.
// JSON that is already encoded (a json.RawMessage, as withPosition makes)
// is taken as it is: json.Marshal would compact it again.
func jsonAnswer(status int, v any, header map[string]string) (command.Answer, error) {
	body, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if body, err = json.Marshal(v); err != nil {
			return command.Answer{}, err
		}
	}
	if header == nil {
		header = make(map[string]string, 1)
	}
	header["Content-Type"] = "application/json"
	return command.Answer{Status: status, Header: header, Body: append(body, '\n')}, nil
}

// secretShownOnce is what a retry of a write whose answer showed the
// secret of the resource at path is answered: 409 secret-shown-once, with
// the resource's Location and how to get a new secret.
func secretShownOnce(path string) (command.Answer, error) {
	p := newProblem(http.StatusConflict, "secret-shown-once", "this request was answered before, with the signing secret of "+path+
		", which is shown only once and not kept; to get a new secret, rotate it: POST "+path+"/rotate-secret")
	body, err := json.Marshal(p)
	if err != nil {
		return command.Answer{}, err
	}
	return command.Answer{Status: p.Status, Body: append(body, '\n'),
		Header: map[string]string{"Content-Type": "application/problem+json", "Location": path}}, nil
}

// answerForgotten is what a retry is answered when an erasure deleted the
// answer of its key, which named the erased subject: 409 conflict, with
// the answer's Location (an id) if it had one; the write does not run
// again (a retried creation would make the erased person anew).
func answerForgotten(location string) (command.Answer, error) {
	p := newProblem(http.StatusConflict, "conflict", "this request was answered before, but its answer named a customer or "+
		"staff member erased since and is not kept; the request is not run again")
	body, err := json.Marshal(p)
	if err != nil {
		return command.Answer{}, err
	}
	header := map[string]string{"Content-Type": "application/problem+json"}
	if location != "" {
		header["Location"] = location
	}
	return command.Answer{Status: p.Status, Body: append(body, '\n'), Header: header}, nil
}

func writeAnswer(w http.ResponseWriter, a command.Answer) {
	for k, v := range a.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body) // the client went away; nobody reads an answer
}
