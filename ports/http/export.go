package httpport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"hearth/app/ops"
	"hearth/app/publicevent"
	"hearth/domain/apperr"
)

// LimitExports is the limit (problem member limit) of a merchant's exports
// running at once on an instance.
const LimitExports = "exports"

// exportRetryAfter is the Retry-After of a refused export: about what one
// export of a large customer takes to build and send.
const exportRetryAfter = 5 * time.Second

// errTooManyExports is an export refused because the instance builds
// ExportMaxInFlight already (503 too-many-exports).
var errTooManyExports = errors.New("too many exports are being built on this server; try again shortly")

// oneExport runs h, a customer's or a staff member's export, in one of the
// instance's export slots. An export is built whole in memory (up to
// ops.MaxExportItems of each list) and held until its answer is written,
// and the instance's memory is every tenant's: so at most
// ExportMaxInFlight run at once, at most ExportMerchantMaxInFlight of them
// for one merchant. Over either the request is refused at once, with
// Retry-After, rather than queued: a queue would hold the request's
// in-flight slot, and the client's connection, for as long as the exports
// ahead of it take.
func (s *server) oneExport(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		release, refused := s.exportSlots.try(principal(r).MerchantID)
		switch refused {
		case refusedMerchant:
			return &apperr.LimitError{Limit: LimitExports, RetryAfter: exportRetryAfter, Detail: fmt.Sprintf(
				"this merchant has %d export(s) running on this server, its share; try again when one is done", s.ExportMerchantMaxInFlight)}
		case refusedInstance:
			w.Header().Set("Retry-After", strconv.Itoa(int(exportRetryAfter.Seconds())))
			return errTooManyExports
		}
		defer release()
		return h(w, r)
	}
}

// CustomerExports exports everything held about one customer
// (ops.Exports).
type CustomerExports interface {
	ExportCustomer(ctx context.Context, req ops.ExportRequest) (ops.CustomerExport, error)
}

// exportCustomer answers GET /v1/customers/{id}/export for an operator key
// of the customer's merchant: one document, recorded in the audit log as
// done by the key.
func (s *server) exportCustomer(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	p := principal(r)
	x, err := s.Exports.ExportCustomer(r.Context(), ops.ExportRequest{By: p.Subject(), MerchantID: p.MerchantID, CustomerID: id})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store") // personal data: no cache keeps a copy
	writeJSON(w, http.StatusOK, CustomerExportBodyOf(x))
	return nil
}

// CustomerExportBody is a customer's export as GET
// /v1/customers/{id}/export and `app customers export` show it (the schema
// CustomerExport of the OpenAPI document).
type CustomerExportBody struct {
	Schema            string                 `json:"schema"`
	ExportedAt        time.Time              `json:"exported_at"`
	MerchantID        string                 `json:"merchant_id"`
	Customer          customerBody           `json:"customer"`
	ServiceRequests   []exportedRequestBody  `json:"service_requests"`
	Orders            []exportedOrderBody    `json:"orders"`
	Plans             []planBody             `json:"plans"`
	Schedules         []exportedScheduleBody `json:"schedules"`
	ChangeLog         []changeBody           `json:"change_log"`
	Events            []publicevent.Event    `json:"events"`
	WebhookDeliveries []exportedDeliveryBody `json:"webhook_deliveries"`
}

// exportedOrderBody is an order of the export: the order as GET shows it,
// and the personal fields it withholds (ops.ExportedOrder), absent when
// none, as in the change log's snapshots. Only the export has them: the
// GETs show the rows as the read model holds them.
type exportedOrderBody struct {
	orderBody
	Withheld []string `json:"withheld,omitempty"`
}

// exportedScheduleBody is a schedule of the export, as exportedOrderBody.
type exportedScheduleBody struct {
	scheduleBody
	Withheld []string `json:"withheld,omitempty"`
}

// exportedRequestBody is a service request of the export, as
// exportedOrderBody.
type exportedRequestBody struct {
	serviceRequestBody
	Withheld []string `json:"withheld,omitempty"`
}

// exportedDeliveryBody is a delivery of the log, its endpoint's URL and
// the payload it sends.
type exportedDeliveryBody struct {
	webhookDeliveryBody
	URL     string            `json:"url"`
	Payload publicevent.Event `json:"payload"`
}

// CustomerExportBodyOf maps an export.
func CustomerExportBodyOf(x ops.CustomerExport) CustomerExportBody {
	return CustomerExportBody{
		Schema: x.Schema, ExportedAt: x.ExportedAt, MerchantID: x.MerchantID, Customer: customerBodyOf(x.Customer),
		ServiceRequests: mapAll(x.ServiceRequests, func(v ops.ExportedServiceRequest) exportedRequestBody {
			return exportedRequestBody{serviceRequestBody: serviceRequestBodyOf(v.ServiceRequest), Withheld: v.Withheld}
		}),
		Orders: mapAll(x.Orders, func(v ops.ExportedOrder) exportedOrderBody {
			return exportedOrderBody{orderBody: orderBodyOf(v.Order), Withheld: v.Withheld}
		}),
		Plans: mapAll(x.Plans, planBodyOf),
		Schedules: mapAll(x.Schedules, func(v ops.ExportedSchedule) exportedScheduleBody {
			return exportedScheduleBody{scheduleBody: scheduleBodyOf(v.Schedule), Withheld: v.Withheld}
		}),
		ChangeLog: mapAll(x.ChangeLog, changeBodyOf),
		Events:    x.Events,
		WebhookDeliveries: mapAll(x.WebhookDeliveries, func(d ops.ExportedDelivery) exportedDeliveryBody {
			return exportedDeliveryBody{webhookDeliveryBody: webhookDeliveryBodyOf(d.Delivery), URL: d.URL, Payload: d.Payload}
		}),
	}
}

// StaffMemberExports exports everything held about one staff member
// (ops.StaffExports).
type StaffMemberExports interface {
	ExportStaffMember(ctx context.Context, req ops.StaffExportRequest) (ops.StaffExport, error)
}

// exportStaffMember answers GET /v1/staff/{id}/export as exportCustomer
// does a customer's.
func (s *server) exportStaffMember(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	p := principal(r)
	x, err := s.StaffExports.ExportStaffMember(r.Context(), ops.StaffExportRequest{By: p.Subject(), MerchantID: p.MerchantID, StaffID: id})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store") // personal data: no cache keeps a copy
	writeJSON(w, http.StatusOK, StaffExportBodyOf(x))
	return nil
}

// StaffExportBody is a staff member's export as GET /v1/staff/{id}/export
// and `app staff export` show it (the schema StaffExport of the OpenAPI
// document).
type StaffExportBody struct {
	Schema       string                 `json:"schema"`
	ExportedAt   time.Time              `json:"exported_at"`
	MerchantID   string                 `json:"merchant_id"`
	StaffMember  staffBody              `json:"staff_member"`
	WorkingHours workingHoursBody       `json:"working_hours"`
	Keys         []exportedKeyBody      `json:"keys"`
	Schedules    []exportedScheduleBody `json:"schedules"`
}

// exportedKeyBody is a worker key of the staff member's export: KeyBody's
// fields that are theirs (no merchant, no staff id: the document's).
type exportedKeyBody struct {
	ID         string     `json:"id"`
	Role       string     `json:"role"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

// StaffExportBodyOf maps a staff member's export.
func StaffExportBodyOf(x ops.StaffExport) StaffExportBody {
	return StaffExportBody{
		Schema: x.Schema, ExportedAt: x.ExportedAt, MerchantID: x.MerchantID, StaffMember: staffBodyOf(x.StaffMember),
		WorkingHours: workingHoursBodyOf(x.WorkingHours),
		Keys: mapAll(x.Keys, func(k ops.ExportedKey) exportedKeyBody {
			return exportedKeyBody{ID: k.ID, Role: k.Role, Name: k.Name, CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsedAt,
				ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt}
		}),
		Schedules: mapAll(x.Schedules, func(v ops.ExportedSchedule) exportedScheduleBody {
			return exportedScheduleBody{scheduleBody: scheduleBodyOf(v.Schedule), Withheld: v.Withheld}
		}),
	}
}
