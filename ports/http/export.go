package httpport

import (
	"context"
	"net/http"
	"time"

	"hearth/app/ops"
	"hearth/app/publicevent"
)

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
	ServiceRequests   []serviceRequestBody   `json:"service_requests"`
	Orders            []orderBody            `json:"orders"`
	Plans             []planBody             `json:"plans"`
	Schedules         []scheduleBody         `json:"schedules"`
	ChangeLog         []changeBody           `json:"change_log"`
	Events            []publicevent.Event    `json:"events"`
	WebhookDeliveries []exportedDeliveryBody `json:"webhook_deliveries"`
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
		ServiceRequests: mapAll(x.ServiceRequests, serviceRequestBodyOf), Orders: mapAll(x.Orders, orderBodyOf),
		Plans:     mapAll(x.Plans, planBodyOf),
		Schedules: mapAll(x.Schedules, scheduleBodyOf), ChangeLog: mapAll(x.ChangeLog, changeBodyOf),
		Events: x.Events,
		WebhookDeliveries: mapAll(x.WebhookDeliveries, func(d ops.ExportedDelivery) exportedDeliveryBody {
			return exportedDeliveryBody{webhookDeliveryBody: webhookDeliveryBodyOf(d.Delivery), URL: d.URL, Payload: d.Payload}
		}),
	}
}
