package httpport

import (
	"net/http"

	"hearth/app/command"
	"hearth/app/customer"
)

type customerInput struct {
	Name    string `json:"name"`
	Phone   string `json:"phone"`
	Email   string `json:"email"`
	Address string `json:"address"`
	Notes   string `json:"notes"`
}

func (s *server) createCustomer(w http.ResponseWriter, r *http.Request) error {
	var in customerInput
	if err := decode(r, &in); err != nil {
		return err
	}
	c, err := s.App.Commands.CreateCustomer.Handle(r.Context(), command.CreateCustomer{
		MerchantID: principal(r).MerchantID, Now: s.Now(),
		Customer: customer.Customer{Name: in.Name, Phone: in.Phone, Email: in.Email, Address: in.Address, Notes: in.Notes},
	})
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/customers/"+c.ID)
	writeJSON(w, http.StatusCreated, c)
	return nil
}

func (s *server) getCustomer(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	c, err := s.App.Queries.Customers.Get(r.Context(), principal(r).MerchantID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

func (s *server) listCustomers(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	page := p.page()
	q := p.v.Get("q")
	if len(q) > 200 {
		p.fail("q", "must be at most 200 bytes")
	}
	if p.err != nil {
		return p.err
	}
	list, err := s.App.Queries.Customers.List(r.Context(), principal(r).MerchantID, q, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}
