package httpport

import (
	"context"
	"net/http"
	"time"

	"hearth/app/command"
	"hearth/domain/webhook"
)

// webhookRoutes are the routes of webhook endpoints and their delivery logs
// (operator keys only). Every write is one transaction of the webhook
// store, which checks the key first (write, versioned: keyInWrite); what
// a use case does before it (the URL's target check, reading the delivery
// to redeliver) writes nothing.
func (s *server) webhookRoutes(v1, write, versioned func(string, handlerFunc) route) []route {
	return []route{
		write("POST /v1/webhook-endpoints", s.createWebhookEndpoint),
		v1("GET /v1/webhook-endpoints", s.listWebhookEndpoints),
		v1("GET /v1/webhook-endpoints/{id}", s.getWebhookEndpoint),
		versioned("PATCH /v1/webhook-endpoints/{id}", s.updateWebhookEndpoint),
		versioned("DELETE /v1/webhook-endpoints/{id}", s.deleteWebhookEndpoint),
		versioned("POST /v1/webhook-endpoints/{id}/rotate-secret", s.rotateWebhookSecret),
		write("POST /v1/webhook-endpoints/{id}/test", s.testWebhookEndpoint),
		v1("GET /v1/webhook-endpoints/{id}/deliveries", s.listWebhookDeliveries),
		v1("GET /v1/webhook-endpoints/{id}/deliveries/{delivery_id}", s.getWebhookDelivery),
		write("POST /v1/webhook-endpoints/{id}/deliveries/{delivery_id}/redeliver", s.redeliverWebhook),
	}
}

// webhookEndpointInput is the body of POST and PATCH: nil fields are not
// given (POST: url required, event_types empty for all, enabled true).
type webhookEndpointInput struct {
	URL             *string   `json:"url"`
	EventTypes      *[]string `json:"event_types"`
	Description     *string   `json:"description"`
	Enabled         *bool     `json:"enabled"`
	ExpectedVersion *int      `json:"expected_version"`
}

// endpointAnswer answers a write of an endpoint with the endpoint; with
// the secret too when withSecret (a creation or a rotation: the only time
// it is shown).
func endpointAnswer(status int, withSecret bool) answerer[*webhook.Endpoint] {
	how := answerer[*webhook.Endpoint]{
		pick: pickRecord[webhook.Endpoint],
		render: func(_ context.Context, e *webhook.Endpoint) (command.Answer, error) {
			body := webhookEndpointBodyOf(*e)
			if withSecret {
				body.Secret = e.Secret
			}
			header := map[string]string{"ETag": etag(e.Version)}
			if status == http.StatusCreated {
				header["Location"] = "/v1/webhook-endpoints/" + e.ID
			}
			return jsonAnswer(status, body, header)
		},
	}
	if withSecret { // a retry with the key is not shown the secret (answer.go)
		how.secretOf = func(e *webhook.Endpoint) string { return "/v1/webhook-endpoints/" + e.ID }
	}
	return how
}

func (s *server) createWebhookEndpoint(w http.ResponseWriter, r *http.Request) error {
	var in webhookEndpointInput
	if err := decode(r, &in); err != nil {
		return err
	}
	if in.ExpectedVersion != nil {
		return malformed("expected_version", "is not a field of a new endpoint")
	}
	e := webhook.Endpoint{URL: deref(in.URL), Description: deref(in.Description), Enabled: in.Enabled == nil || *in.Enabled}
	if in.EventTypes != nil {
		e.EventTypes = *in.EventTypes
	}
	how := endpointAnswer(http.StatusCreated, true)
	created, err := s.App.Commands.Webhooks.CreateEndpoint(how.seal(r), principal(r).MerchantID, principal(r).Subject(), e, s.Now())
	if err != nil {
		return err
	}
	return how.reply(w, r, &created)
}

func (s *server) listWebhookEndpoints(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	page := p.page()
	if p.err != nil {
		return p.err
	}
	list, err := s.App.Queries.Webhooks.Endpoints(r.Context(), principal(r).MerchantID, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listBodyOf(list, webhookEndpointBodyOf))
	return nil
}

func (s *server) getWebhookEndpoint(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	e, err := s.App.Queries.Webhooks.Endpoint(r.Context(), principal(r).MerchantID, id)
	if err != nil {
		return err
	}
	if notModified(w, r, e.Version) {
		return nil
	}
	writeJSON(w, http.StatusOK, webhookEndpointBodyOf(e))
	return nil
}

func (s *server) updateWebhookEndpoint(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var in webhookEndpointInput
	if err := decode(r, &in); err != nil {
		return err
	}
	expected, err := expectedVersion(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	how := endpointAnswer(http.StatusOK, false)
	e, err := s.App.Commands.Webhooks.UpdateEndpoint(how.seal(r), principal(r).MerchantID, principal(r).Subject(), id, command.EndpointChange{
		URL: in.URL, EventTypes: in.EventTypes, Description: in.Description, Enabled: in.Enabled, ExpectedVersion: expected,
	}, s.Now())
	if err != nil {
		return err
	}
	return how.reply(w, r, &e)
}

func (s *server) deleteWebhookEndpoint(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	expected, err := expectedVersion(r, nil)
	if err != nil {
		return err
	}
	if err := noBody(r); err != nil {
		return err
	}
	if err := s.App.Commands.Webhooks.DeleteEndpoint(r.Context(), principal(r).MerchantID, principal(r).Subject(), id, expected); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// rotateSecretInput is the optional body of POST .../rotate-secret.
type rotateSecretInput struct {
	// Overlap is how long deliveries are signed with the old secret too, a
	// Go duration ("24h", the default); "0s" ends the old secret at once.
	Overlap         *string `json:"overlap"`
	ExpectedVersion *int    `json:"expected_version"`
}

// defaultOverlap is a rotation's overlap when the request names none.
const defaultOverlap = 24 * time.Hour

func (s *server) rotateWebhookSecret(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var in rotateSecretInput
	if err := decodeOptional(r, &in); err != nil {
		return err
	}
	overlap := defaultOverlap
	if in.Overlap != nil {
		if overlap, err = time.ParseDuration(*in.Overlap); err != nil {
			return malformed("overlap", "must be a duration such as 24h or 90m, got %q", *in.Overlap)
		}
	}
	expected, err := expectedVersion(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	how := endpointAnswer(http.StatusOK, true)
	e, err := s.App.Commands.Webhooks.RotateSecret(how.seal(r), principal(r).MerchantID, principal(r).Subject(), id, overlap, expected, s.Now())
	if err != nil {
		return err
	}
	return how.reply(w, r, &e)
}

// deliveryAnswer answers the queueing of a delivery (a test, a
// redelivery): 202, the delivery, pending.
var deliveryAnswer = answerer[*webhook.Delivery]{
	pick: pickRecord[webhook.Delivery],
	render: func(_ context.Context, d *webhook.Delivery) (command.Answer, error) {
		return jsonAnswer(http.StatusAccepted, webhookDeliveryBodyOf(*d), map[string]string{
			"Location": "/v1/webhook-endpoints/" + d.EndpointID + "/deliveries/" + d.ID,
		})
	},
}

func (s *server) testWebhookEndpoint(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := noBody(r); err != nil {
		return err
	}
	d, err := s.App.Commands.Webhooks.Test(deliveryAnswer.seal(r), principal(r).MerchantID, id, s.Now())
	if err != nil {
		return err
	}
	return deliveryAnswer.reply(w, r, &d)
}

func (s *server) listWebhookDeliveries(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	p := newParams(r)
	statuses := p.oneOf("status", []string{webhook.Pending, webhook.Succeeded, webhook.Failed})
	page := p.listPage()
	if p.err != nil {
		return p.err
	}
	list, err := s.App.Queries.Webhooks.Deliveries(r.Context(), principal(r).MerchantID, id, statuses, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listBodyOf(nextOf(p, list), webhookDeliveryBodyOf))
	return nil
}

// deliveryPath reads the {id} and {delivery_id} path values.
func deliveryPath(r *http.Request) (endpointID, deliveryID string, err error) {
	if endpointID, err = pathID(r); err != nil {
		return "", "", err
	}
	if deliveryID, err = pathUUID(r, "delivery_id"); err != nil {
		return "", "", err
	}
	return endpointID, deliveryID, nil
}

func (s *server) getWebhookDelivery(w http.ResponseWriter, r *http.Request) error {
	endpointID, deliveryID, err := deliveryPath(r)
	if err != nil {
		return err
	}
	d, err := s.App.Queries.Webhooks.Delivery(r.Context(), principal(r).MerchantID, endpointID, deliveryID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, webhookDeliveryBodyOf(d))
	return nil
}

func (s *server) redeliverWebhook(w http.ResponseWriter, r *http.Request) error {
	endpointID, deliveryID, err := deliveryPath(r)
	if err != nil {
		return err
	}
	if err := noBody(r); err != nil {
		return err
	}
	d, err := s.App.Commands.Webhooks.Redeliver(deliveryAnswer.seal(r), principal(r).MerchantID, endpointID, deliveryID)
	if err != nil {
		return err
	}
	return deliveryAnswer.reply(w, r, &d)
}

// webhookEndpointBody is an endpoint as the API shows it. Secret is shown
// only in the answer of a creation or a rotation.
type webhookEndpointBody struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	EventTypes  []string `json:"event_types"`
	Description string   `json:"description"`
	Enabled     bool     `json:"enabled"`
	// DisabledReason and DisabledAt say why and when Hearth disabled the
	// endpoint; absent otherwise.
	DisabledReason string     `json:"disabled_reason,omitempty"`
	DisabledAt     *time.Time `json:"disabled_at,omitempty"`
	Secret         string     `json:"secret,omitempty"`
	// PreviousSecretExpiresAt is until when an earlier secret still signs
	// (the latest end of the overlaps of the secrets that still sign);
	// absent when only the current secret signs.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at,omitempty"`
	CreatedAt               time.Time  `json:"created_at"`
	UpdatedAt               time.Time  `json:"updated_at"`
	Version                 int        `json:"version"`
}

func webhookEndpointBodyOf(e webhook.Endpoint) webhookEndpointBody {
	b := webhookEndpointBody{ID: e.ID, URL: e.URL, EventTypes: e.EventTypes, Description: e.Description, Enabled: e.Enabled,
		DisabledReason: e.DisabledReason, DisabledAt: e.DisabledAt, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, Version: e.Version}
	if b.EventTypes == nil {
		b.EventTypes = []string{}
	}
	b.PreviousSecretExpiresAt = e.EarlierSecretsUntil(time.Now())
	return b
}

// webhookDeliveryBody is one delivery of the log. The times, the response
// status and the latency are absent when there are none yet.
type webhookDeliveryBody struct {
	ID               string     `json:"id"`
	EndpointID       string     `json:"endpoint_id"`
	EventID          string     `json:"event_id"`
	EventType        string     `json:"event_type"`
	AggregateID      string     `json:"aggregate_id"`
	AggregateVersion int        `json:"aggregate_version"`
	Ping             bool       `json:"ping"`
	RedeliveryOf     string     `json:"redelivery_of,omitempty"`
	Status           string     `json:"status"`
	Attempts         int        `json:"attempts"`
	NextAttemptAt    *time.Time `json:"next_attempt_at,omitempty"`
	LastAttemptAt    *time.Time `json:"last_attempt_at,omitempty"`
	ResponseStatus   int        `json:"response_status,omitempty"`
	LatencyMS        *float64   `json:"latency_ms,omitempty"`
	Error            string     `json:"error"`
	CreatedAt        time.Time  `json:"created_at"`
	CompletedAt      *time.Time `json:"completed_at,omitempty"`
}

func webhookDeliveryBodyOf(d webhook.Delivery) webhookDeliveryBody {
	b := webhookDeliveryBody{ID: d.ID, EndpointID: d.EndpointID, EventID: d.EventID, EventType: d.EventType,
		AggregateID: d.AggregateID, AggregateVersion: d.AggregateVersion, Ping: d.Ping, RedeliveryOf: d.RedeliveryOf,
		Status: d.Status, Attempts: d.Attempts, NextAttemptAt: d.NextAttemptAt, LastAttemptAt: d.LastAttemptAt,
		ResponseStatus: d.ResponseStatus, Error: d.Error, CreatedAt: d.CreatedAt, CompletedAt: d.CompletedAt}
	if d.Latency > 0 {
		ms := float64(d.Latency.Microseconds()) / 1000
		b.LatencyMS = &ms
	}
	return b
}
