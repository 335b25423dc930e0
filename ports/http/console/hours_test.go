package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/apperr"
	"hearth/domain/availability"
	"hearth/domain/civil"
)

func shiftsOf(t *testing.T, in string) ([]availability.Shift, error) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("a="+url.QueryEscape(in)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	f := &formReader{r: req, loc: time.UTC}
	got := f.shifts("a")
	return got, f.Err()
}

func TestFormReaderShifts(t *testing.T) {
	for in, want := range map[string][]availability.Shift{
		"":                                 nil,
		"09:00-17:00":                      {{Start: civil.At(9, 0), End: civil.At(17, 0)}},
		" 09:00 – 12:00 , 13:00 to 24:00 ": {{Start: civil.At(9, 0), End: civil.At(12, 0)}, {Start: civil.At(13, 0), End: civil.EndOfDay}},
	} {
		got, err := shiftsOf(t, in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	// Written back as read.
	got, _ := shiftsOf(t, "09:00-12:00, 13:00-17:00")
	require.Equal(t, "09:00-12:00, 13:00-17:00", shiftsText(got))
	for _, in := range []string{"9-17", "09:00", "09:00-17:00,", "09:00-25:00", "09:00-17:00; 18:00-19:00"} {
		_, err := shiftsOf(t, in)
		require.Error(t, err, in)
	}
}

// The domain's field names become the forms': a day of the pattern, and
// the added exception's fields; another exception's stay as they are.
func TestHoursFieldsNameTheFormsFields(t *testing.T) {
	err := hoursFields(&apperr.ValidationError{Fields: []apperr.FieldError{
		{Field: "week.tuesday[0].end", Message: "must be after start"},
		{Field: "exceptions[2].shifts[0].end", Message: "must be after start"},
		{Field: "exceptions[2].date", Message: "has an exception already"},
		{Field: "exceptions[0].reason", Message: "must be holiday"},
	}}, 2)
	var v *apperr.ValidationError
	require.ErrorAs(t, err, &v)
	var names []string
	for _, f := range v.Fields {
		names = append(names, f.Field)
	}
	require.Equal(t, []string{"tuesday", "shifts", "date", "exceptions[0].reason"}, names)
}
