package httpport

import (
	"encoding/json"
	"net/http"
	"time"

	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/servicerequest"
)

type serviceRequestInput struct {
	ExpectedVersion    *int     `json:"expected_version"`
	CustomerID         *string  `json:"customer_id"`
	CatalogItemID      *string  `json:"catalog_item_id"`
	Content            *string  `json:"content" text:"multiline"`
	AppointmentStartAt nullable `json:"appointment_start_at"`
	AppointmentEndAt   nullable `json:"appointment_end_at"`
	Source             *string  `json:"source"`
	Notes              *string  `json:"notes" text:"multiline"`
}

// nullable is a field that a PATCH takes off with null, as the resource
// answers it null when unset: encoding/json reads null into a pointer as
// absent, which would keep the value and answer 200 as if it was taken off.
type nullable struct {
	given, null bool
	text        string
}

// UnmarshalJSON is called for every member given, null included; a value
// of another type is a *json.UnmarshalTypeError, which the decoder names
// by its field.
func (n *nullable) UnmarshalJSON(b []byte) error {
	n.given = true
	if string(b) == "null" {
		n.null = true
		return nil
	}
	return json.Unmarshal(b, &n.text)
}

// value is the text given, nil when absent or null.
func (n nullable) value() *string {
	if !n.given || n.null {
		return nil
	}
	return &n.text
}

// appointment parses the appointment window's times.
func (in serviceRequestInput) appointment() (start, end *time.Time, err error) {
	if start, err = parseTime("appointment_start_at", in.AppointmentStartAt.value()); err != nil {
		return nil, nil, err
	}
	end, err = parseTime("appointment_end_at", in.AppointmentEndAt.value())
	return start, end, err
}

func (s *server) createServiceRequest(w http.ResponseWriter, r *http.Request) error {
	var in serviceRequestInput
	if err := decode(r, &in); err != nil {
		return err
	}
	if in.ExpectedVersion != nil {
		return malformed("expected_version", "is not a field of a new request")
	}
	start, end, err := in.appointment()
	if err != nil {
		return err
	}
	source := deref(in.Source)
	if source == "" {
		source = "manual"
	}
	how := s.requestAnswer(r, http.StatusCreated)
	out, err := s.App.Commands.ServiceRequests.Create(how.seal(r), command.CreateServiceRequest{
		Meta: s.meta(r), CustomerID: deref(in.CustomerID), Source: source,
		Details: servicerequest.Details{CatalogItemID: deref(in.CatalogItemID), Content: deref(in.Content),
			AppointmentStartAt: start, AppointmentEndAt: end, Notes: deref(in.Notes)},
	})
	if err != nil {
		return err
	}
	return how.reply(w, r, out)
}

func (s *server) requestTarget(r *http.Request, expected *int) (command.RequestTarget, error) {
	id, err := pathID(r)
	if err != nil {
		return command.RequestTarget{}, err
	}
	expected, err = expectedVersion(r, expected)
	if err != nil {
		return command.RequestTarget{}, err
	}
	return command.RequestTarget{Meta: s.meta(r), RequestID: id, ExpectedVersion: expected}, nil
}

func (s *server) updateServiceRequest(w http.ResponseWriter, r *http.Request) error {
	var in serviceRequestInput
	if err := decode(r, &in); err != nil {
		return err
	}
	if in.CustomerID != nil {
		return malformed("customer_id", "cannot be changed; create a new request")
	}
	if in.Source != nil {
		return malformed("source", "cannot be changed")
	}
	start, end, err := in.appointment()
	if err != nil {
		return err
	}
	t, err := s.requestTarget(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	how := s.requestAnswer(r, http.StatusOK)
	out, err := s.App.Commands.ServiceRequests.UpdateDetails(how.seal(r), command.UpdateServiceRequest{
		RequestTarget: t, CatalogItemID: in.CatalogItemID, Content: in.Content,
		AppointmentStartAt: start, AppointmentEndAt: end, Notes: in.Notes,
		ClearAppointmentStartAt: in.AppointmentStartAt.null, ClearAppointmentEndAt: in.AppointmentEndAt.null,
	})
	if err != nil {
		return err
	}
	return how.reply(w, r, out)
}

func (s *server) changeServiceRequestStatus(w http.ResponseWriter, r *http.Request) error {
	var in statusInput
	if err := decode(r, &in); err != nil {
		return err
	}
	t, err := s.requestTarget(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	how := s.requestAnswer(r, http.StatusOK)
	out, err := s.App.Commands.ServiceRequests.ChangeStatus(how.seal(r), command.ChangeServiceRequestStatus{RequestTarget: t, Status: in.Status})
	if err != nil {
		return err
	}
	return how.reply(w, r, out)
}

type convertInput struct {
	ExpectedVersion *int `json:"expected_version"`
}

// convertServiceRequest answers 201 with the new order. An empty body is
// allowed.
func (s *server) convertServiceRequest(w http.ResponseWriter, r *http.Request) error {
	var in convertInput
	if err := decodeOptional(r, &in); err != nil {
		return err
	}
	t, err := s.requestTarget(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	how := s.orderAnswer(r, http.StatusCreated)
	out, err := s.App.Commands.ServiceRequests.Convert(how.seal(r), t)
	if err != nil {
		return err
	}
	return how.reply(w, r, out)
}

func (s *server) getServiceRequest(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	v, err := s.App.Queries.ServiceRequests.Get(r.Context(), scope(r), id)
	if err != nil {
		return err
	}
	if notModified(w, r, v.Version) {
		return nil
	}
	writeJSON(w, http.StatusOK, serviceRequestBodyOf(v))
	return nil
}

func (s *server) listServiceRequests(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	f := query.ServiceRequestFilter{
		Statuses:   p.oneOf("status", names(servicerequest.Statuses)),
		CustomerID: p.uuid("customer_id"),
	}
	f.From, f.To = p.timeRange()
	page := p.listPage()
	if p.err != nil {
		return p.err
	}
	list, err := s.App.Queries.ServiceRequests.List(r.Context(), scope(r), f, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listBodyOf(nextOf(p, list), serviceRequestBodyOf))
	return nil
}

func names[S ~string](vals []S) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = string(v)
	}
	return out
}
