package command

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"time"

	"hearth/app/publicevent"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
)

// WebhookStore keeps webhook endpoints and queues their deliveries
// (adapters/webhooks). Each write stores the answer of an idempotent
// attempt (IdempotentOf) in its own transaction, from the endpoint or the
// delivery it wrote.
type WebhookStore interface {
	// InsertEndpoint stores a new endpoint and records audit, in one
	// transaction; a *apperr.RuleError (webhook.RuleEndpointLimit) when
	// the merchant has MaxEndpoints.
	InsertEndpoint(ctx context.Context, e *webhook.Endpoint, audit Audit) error
	// UpdateEndpoint loads the merchant's endpoint (apperr.ErrNotFound when
	// it has none), lets fn change it, saves it and records the entry
	// audit returns for it before and after, in one transaction.
	UpdateEndpoint(ctx context.Context, merchantID, id string, fn func(e *webhook.Endpoint) error,
		audit func(before, after webhook.Endpoint) Audit) (webhook.Endpoint, error)
	// DeleteEndpoint deletes the merchant's endpoint and its delivery log,
	// and records the entry audit returns for the endpoint deleted (its
	// id, merchant and URL), in one transaction.
	DeleteEndpoint(ctx context.Context, merchantID, id string, expected *int, audit func(deleted webhook.Endpoint) Audit) error
	// QueueDelivery queues the delivery that make returns for the
	// merchant's endpoint, as make sees it (locked until the commit), and
	// wakes the dispatcher; a *apperr.LimitError (webhook.LimitQueued) when
	// the endpoint has webhook.MaxQueued test pings and redeliveries
	// pending.
	QueueDelivery(ctx context.Context, merchantID, endpointID string, make func(e webhook.Endpoint) (webhook.Delivery, error)) (webhook.Delivery, error)
	// Delivery reads one delivery of the merchant's endpoint.
	Delivery(ctx context.Context, merchantID, endpointID, id string) (webhook.Delivery, error)
}

// Audit actions of the endpoints' writes.
const (
	ActionEndpointCreate       = "webhook_endpoint.create"
	ActionEndpointUpdate       = "webhook_endpoint.update"
	ActionEndpointRotateSecret = "webhook_endpoint.rotate_secret"
	ActionEndpointDelete       = "webhook_endpoint.delete"
)

// Audit is the audit log's entry of an endpoint's write (ops.AuditEntry's
// fields, which app/command does not import), decided here and recorded
// by the store in the write's own transaction: an endpoint decides where
// the merchant's events go, with its customers' personal data, and its
// secret is what vouches for them, so who changed either is the first
// thing an audit of a leak asks.
type Audit struct {
	Actor   string
	Action  string
	Target  string
	Details map[string]any
}

// endpointAudit is the entry of action on e by actor. It names where the
// events go by the URL's origin only (webhook.Origin): the path and query
// are where receivers keep their tokens, which the platform's audit log
// has no business holding; never a secret.
func endpointAudit(actor, action string, e webhook.Endpoint, details map[string]any) Audit {
	details["merchant_id"] = e.MerchantID
	details["url"] = webhook.Origin(e.URL)
	return Audit{Actor: actor, Action: action, Target: "webhook_endpoint/" + e.ID, Details: details}
}

// TargetCheck refuses (with a reason) a URL whose host is, or resolves
// only to, addresses deliveries may not reach (webhook.Refused), unless the
// configuration allows them.
type TargetCheck func(ctx context.Context, rawURL string) error

// Webhooks are the use cases of webhook endpoints.
type Webhooks struct {
	store WebhookStore
	check TargetCheck
}

// NewWebhooks checks its dependencies.
func NewWebhooks(store WebhookStore, check TargetCheck) (Webhooks, error) {
	if store == nil || check == nil {
		return Webhooks{}, errors.New("command.NewWebhooks: nil dependency")
	}
	return Webhooks{store: store, check: check}, nil
}

// MaxOverlap bounds a secret rotation's overlap: a receiver has that long
// to switch to the new secret.
const MaxOverlap = 7 * 24 * time.Hour

// CreateEndpoint validates e (URL, its target, event types, description) and
// stores it for the merchant under a new id with a new signing secret, as
// done by actor.
func (h Webhooks) CreateEndpoint(ctx context.Context, merchantID, actor string, e webhook.Endpoint, now time.Time) (webhook.Endpoint, error) {
	if err := h.valid(ctx, &e); err != nil {
		return e, err
	}
	now = event.Instant(now)
	e.ID, e.MerchantID, e.Secret, e.Version, e.CreatedAt, e.UpdatedAt = uuid.New(), merchantID, webhook.NewSecret(), 1, now, now
	e.DisabledReason, e.DisabledAt, e.PreviousSecret, e.PreviousSecretUntil, e.OlderSecret, e.OlderSecretUntil = "", nil, "", nil, "", nil
	return e, h.store.InsertEndpoint(ctx, &e, endpointAudit(actor, ActionEndpointCreate, e,
		map[string]any{"event_types": e.EventTypes, "enabled": e.Enabled}))
}

// valid normalises e and checks its URL's target.
func (h Webhooks) valid(ctx context.Context, e *webhook.Endpoint) error {
	if err := e.Normalize(publicevent.Types()); err != nil {
		return err
	}
	if err := h.check(ctx, e.URL); err != nil {
		return apperr.Invalid("url", "%v", err)
	}
	return nil
}

// EndpointChange is a partial update of an endpoint: nil fields keep their
// value. ExpectedVersion, when set, must be the endpoint's version.
type EndpointChange struct {
	URL             *string
	EventTypes      *[]string
	Description     *string
	Enabled         *bool
	ExpectedVersion *int
}

// UpdateEndpoint applies c, as done by actor. Enabling an endpoint that Hearth disabled clears
// the reason; a change that changes nothing leaves the version alone.
//
// A new URL's target is checked before the store's transaction, and its
// verdict applied inside it when the URL changes: the check resolves a
// name the merchant chose, on a DNS server the merchant may run, for up to
// its timeout, and the transaction holds the endpoint's row lock and so a
// transaction id; while it runs, no reader below pg_snapshot_xmin (every
// merchant's event feed, the projections, the webhook fan-out) goes past
// it.
func (h Webhooks) UpdateEndpoint(ctx context.Context, merchantID, actor, id string, c EndpointChange, now time.Time) (webhook.Endpoint, error) {
	var refused error
	if c.URL != nil {
		if u := strings.TrimSpace(*c.URL); webhook.URLProblem(u) == "" {
			refused = h.check(ctx, u)
		}
	}
	audit := func(before, after webhook.Endpoint) Audit {
		details := map[string]any{"changed": changedFields(before, after), "enabled": after.Enabled, "version": after.Version}
		if before.URL != after.URL {
			details["url_before"] = webhook.Origin(before.URL)
		}
		if !slices.Equal(before.EventTypes, after.EventTypes) {
			details["event_types"] = after.EventTypes
		}
		return endpointAudit(actor, ActionEndpointUpdate, after, details)
	}
	return h.change(ctx, merchantID, id, c.ExpectedVersion, now, audit, func(e *webhook.Endpoint) error {
		urlBefore := e.URL
		set(&e.URL, c.URL)
		set(&e.EventTypes, c.EventTypes)
		set(&e.Description, c.Description)
		if c.Enabled != nil && *c.Enabled != e.Enabled {
			e.Enabled = *c.Enabled
			if e.Enabled {
				e.DisabledReason, e.DisabledAt = "", nil
			}
		}
		if err := e.Normalize(publicevent.Types()); err != nil {
			return err
		}
		if e.URL != urlBefore && refused != nil { // Normalize trims it as above: the URL checked
			return apperr.Invalid("url", "%v", refused)
		}
		return nil
	})
}

// changedFields names the fields of an endpoint a change changed (never
// their values: a description is the merchant's free text).
func changedFields(before, after webhook.Endpoint) []string {
	changed := []string{}
	if before.URL != after.URL {
		changed = append(changed, "url")
	}
	if !slices.Equal(before.EventTypes, after.EventTypes) {
		changed = append(changed, "event_types")
	}
	if before.Description != after.Description {
		changed = append(changed, "description")
	}
	if before.Enabled != after.Enabled {
		changed = append(changed, "enabled")
	}
	return changed
}

func set[V any](dst *V, src *V) {
	if src != nil {
		*dst = *src
	}
}

// RotateSecret gives the endpoint a new signing secret, as done by actor.
// For overlap (at
// most MaxOverlap; 0: none) deliveries are signed with both, so that its
// receiver can switch without refusing any; earlier secrets still inside
// their overlaps keep signing (webhook.Endpoint.Rotate, at most
// webhook.MaxSecrets at once).
func (h Webhooks) RotateSecret(ctx context.Context, merchantID, actor, id string, overlap time.Duration, expected *int, now time.Time) (webhook.Endpoint, error) {
	if overlap < 0 || overlap > MaxOverlap {
		return webhook.Endpoint{}, apperr.Invalid("overlap", "must be from 0s to %s, got %s", MaxOverlap, overlap)
	}
	now = event.Instant(now)
	audit := func(_, after webhook.Endpoint) Audit {
		return endpointAudit(actor, ActionEndpointRotateSecret, after, map[string]any{"overlap": overlap.String(), "version": after.Version})
	}
	return h.change(ctx, merchantID, id, expected, now, audit, func(e *webhook.Endpoint) error {
		return e.Rotate(webhook.NewSecret(), now, overlap)
	})
}

// change runs fn on the stored endpoint, checks the version the caller
// stated, moves the version and updated_at on when fn changed anything, and
// has the store record audit's entry with the change.
func (h Webhooks) change(ctx context.Context, merchantID, id string, expected *int, now time.Time,
	audit func(before, after webhook.Endpoint) Audit, fn func(e *webhook.Endpoint) error) (webhook.Endpoint, error) {
	return h.store.UpdateEndpoint(ctx, merchantID, id, func(e *webhook.Endpoint) error {
		if expected != nil && *expected != e.Version {
			return &apperr.VersionError{Kind: "webhook endpoint", ID: e.ID, Expected: *expected, Actual: e.Version}
		}
		before := *e
		if err := fn(e); err != nil {
			return err
		}
		if !reflect.DeepEqual(before, *e) {
			e.Version++
			e.UpdatedAt = event.Instant(now)
		}
		return nil
	}, audit)
}

// DeleteEndpoint deletes the endpoint and its delivery log, as done by
// actor; deliveries not yet made are dropped. With expected set, only
// while the endpoint is at that version (a *apperr.VersionError
// otherwise): the client deletes the endpoint it read, not one another
// client has pointed elsewhere since.
func (h Webhooks) DeleteEndpoint(ctx context.Context, merchantID, actor, id string, expected *int) error {
	return h.store.DeleteEndpoint(ctx, merchantID, id, expected, func(deleted webhook.Endpoint) Audit {
		return endpointAudit(actor, ActionEndpointDelete, deleted, map[string]any{})
	})
}

// Test queues a ping (webhook_endpoint.ping) to an enabled endpoint: tried
// once, never retried.
func (h Webhooks) Test(ctx context.Context, merchantID, id string, now time.Time) (webhook.Delivery, error) {
	return h.store.QueueDelivery(ctx, merchantID, id, func(e webhook.Endpoint) (webhook.Delivery, error) {
		if err := enabled(e); err != nil {
			return webhook.Delivery{}, err
		}
		ping := publicevent.Ping(uuid.New(), merchantID, e.ID, now)
		body, err := publicevent.Marshal(ping)
		if err != nil {
			return webhook.Delivery{}, err
		}
		return webhook.Delivery{
			ID: uuid.New(), EndpointID: e.ID, MerchantID: merchantID, EventID: ping.ID, EventType: ping.Type,
			AggregateID: ping.AggregateID, AggregateVersion: ping.AggregateVersion, Ping: true, Body: body,
		}, nil
	})
}

// Redeliver queues one delivery of an enabled endpoint again, as a new
// delivery of the same event (same body, same webhook-id): after whatever
// is pending for its aggregate, with a fresh retry schedule.
func (h Webhooks) Redeliver(ctx context.Context, merchantID, endpointID, deliveryID string) (webhook.Delivery, error) {
	d, err := h.store.Delivery(ctx, merchantID, endpointID, deliveryID)
	if err != nil {
		return d, err
	}
	return h.store.QueueDelivery(ctx, merchantID, endpointID, func(e webhook.Endpoint) (webhook.Delivery, error) {
		if err := enabled(e); err != nil {
			return webhook.Delivery{}, err
		}
		again := webhook.Delivery{
			ID: uuid.New(), EndpointID: e.ID, MerchantID: merchantID, EventID: d.EventID, EventType: d.EventType,
			AggregateID: d.AggregateID, AggregateVersion: d.AggregateVersion, Ping: d.Ping,
			Body: d.Body, RedeliveryOf: d.ID,
		}
		return again, nil
	})
}

func enabled(e webhook.Endpoint) error {
	if e.Enabled {
		return nil
	}
	detail := "the endpoint is disabled; enable it (PATCH enabled: true) first"
	if e.DisabledReason != "" {
		detail = "the endpoint was disabled (" + e.DisabledReason + "); enable it (PATCH enabled: true) first"
	}
	return &apperr.RuleError{Rule: webhook.RuleEndpointDisabled, Detail: detail}
}
