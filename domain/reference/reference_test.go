package reference_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/domain/apperr"
	"hearth/domain/reference"
)

// Names, phones and emails refuse every control character; addresses and
// notes allow tab and line breaks.
func TestNormalizeRefusesControlCharacters(t *testing.T) {
	t.Parallel()
	fields := func(err error) []string {
		var v *apperr.ValidationError
		require.ErrorAs(t, err, &v)
		var out []string
		for _, f := range v.Fields {
			out = append(out, f.Field)
		}
		return out
	}
	c := reference.Customer{Name: "a\x00b", Phone: "1\t2", Email: "a@b\x1b", Address: "1 Main St\nSpringfield", Notes: "ok\r\n\tok"}
	require.Equal(t, []string{"name", "phone", "email"}, fields(c.Normalize()))
	c = reference.Customer{Name: "Ada", Address: "a\x00", Notes: "\x7f"}
	require.Equal(t, []string{"address", "notes"}, fields(c.Normalize()))
	s := reference.StaffMember{Name: "Wanda\n", Phone: "\x00"}
	require.Equal(t, []string{"phone"}, fields(s.Normalize()), "trimmed, the name is fine")
	i := reference.CatalogItem{Name: "Sink\x00"}
	require.Equal(t, []string{"name"}, fields(i.Normalize()))
	require.NoError(t, (&reference.Customer{Name: "Zoë", Address: "1 Main St\nSpringfield", Notes: "a\tb"}).Normalize())
}
