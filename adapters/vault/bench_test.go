package vault_test

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/json"
	"testing"

	"hearth/adapters/vault"
	"hearth/domain/order"
)

// The cost of sealing one event's personal fields, beside marshalling it
// alone (what a command pays without sealing).
func BenchmarkSeal(b *testing.B) {
	block, _ := aes.NewCipher(make([]byte, 32))
	aead, _ := cipher.NewGCM(block)
	e := order.Created{OrderID: "0b9e7f64-5f3c-4d1a-9a49-3c1d6f1e2a10", CustomerID: "5d2c1b8e-7d6f-4a3b-8c9d-0e1f2a3b4c5d",
		AmountCents: 1200, Notes: "call Mrs Patel on 07700 900123 before 9, key under the mat", Status: order.StatusPending}
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal+seal", func(b *testing.B) {
		for b.Loop() {
			data, err := json.Marshal(e)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := vault.SealWith(aead, e.CustomerID, "OrderCreated", data, order.Personal["OrderCreated"]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
