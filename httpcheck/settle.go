package httpcheck

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/ratefields"
	"github.com/sluice-rl/sluice/service"
)

// SettlePath is where a reservation made by a check (reserve=N) is settled
// at its actual cost, by POST: the application calls it once the work is
// done, with the id the check's answer carried (HeaderReservation).
const SettlePath = "/v1/settle"

// settleTimeout bounds a settle's wait on the store, as a lease's is.
const settleTimeout = 2 * time.Second

// Settle is one parsed settle.
type Settle struct {
	ID     string
	Actual int64
}

// ParseSettle reads a settle from its raw query (id=ID&actual=N) or, with
// no query, from the X-Sluice-Reservation and X-Sluice-Actual headers, as
// Parse reads a check's two forms. A parameter given twice, an unknown
// one, or a bad value is a *BadRequest.
func ParseSettle(rawQuery string, h http.Header) (Settle, error) {
	var st Settle
	var id, actual string
	if rawQuery != "" {
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			return st, bad("invalid query: %s", err.Error())
		}
		for name, vs := range q {
			if len(vs) > 1 {
				return st, bad("parameter %s given more than once", name)
			}
			switch name {
			case "id":
				id = vs[0]
			case "actual":
				actual = vs[0]
			default:
				return st, bad("unknown parameter %q: expected id and actual", name)
			}
		}
	} else {
		for _, name := range []string{HeaderReservation, HeaderActual} {
			if len(h.Values(name)) > 1 {
				return st, bad("header %s given more than once", name)
			}
		}
		id, actual = h.Get(HeaderReservation), h.Get(HeaderActual)
	}
	switch {
	case id == "":
		return st, bad("missing id: give id=ID, the %s a check's answer carried, in the query or as the header", HeaderReservation)
	case len(id) > maxReservationID:
		return st, bad("invalid id of %d bytes: no reservation id is that long", len(id))
	case actual == "":
		return st, bad("missing actual: give actual=N, the cost the work turned out to have, in the query or as the %s header", HeaderActual)
	}
	n, err := strconv.ParseInt(actual, 10, 64)
	if err != nil || n < 0 {
		return st, bad("invalid actual %q: must be a non-negative integer", actual)
	}
	st.ID, st.Actual = id, n
	return st, nil
}

// maxReservationID bounds the id a settle reads: ids are 16 hex digits,
// and a 400 quotes what it was given.
const maxReservationID = 128

// settle answers POST SettlePath: 200 with the key's X-RateLimit-* fields
// as the settle left them (X-RateLimit-Over when the excess took it over
// its budget), 404 for a reservation this sidecar does not hold, 400 for
// a settle it cannot read, 503 when the store could not answer.
func (s *Server) settle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header()["Allow"] = []string{http.MethodPost}
		plain(w, http.StatusMethodNotAllowed, "a settle changes the budget: send it by POST")
		return
	}
	st, err := ParseSettle(r.URL.RawQuery, r.Header)
	if err != nil {
		plain(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), settleTimeout)
	defer cancel()
	d, err := s.svc.Settle(ctx, st.ID, st.Actual)
	var gone *service.UnknownReservationError
	switch {
	case errors.As(err, &gone):
		plain(w, http.StatusNotFound, err.Error())
		return
	case errors.Is(err, engine.ErrInvalid):
		plain(w, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		s.log.Debug("http settle: no decision", "err", err)
		plain(w, http.StatusServiceUnavailable, "not settled, the reservation stays charged at its estimate: "+err.Error())
		return
	}
	h := w.Header()
	h["X-Ratelimit-Limit"] = []string{strconv.FormatInt(d.Limit, 10)}
	h["X-Ratelimit-Remaining"] = []string{strconv.FormatInt(max(d.Remaining, 0), 10)}
	h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(ratefields.Seconds(d.ResetAfter), 10)}
	if d.Remaining < 0 {
		h["X-Ratelimit-Over"] = []string{strconv.FormatInt(-d.Remaining, 10)}
	}
	w.WriteHeader(http.StatusOK)
}
