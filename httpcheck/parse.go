package httpcheck

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Path is the check's address. Any path under it (Path + "/...") is a
// check too, read from headers only: Envoy's ext_authz puts the original
// request's path, and its query, after a configured prefix.
const Path = "/v1/check"

// The headers a gateway may set instead of query parameters.
const (
	HeaderPolicy     = "X-Sluice-Policy"
	HeaderKey        = "X-Sluice-Key"
	HeaderCost       = "X-Sluice-Cost"
	HeaderCharge     = "X-Sluice-Charge"
	HeaderDenyStatus = "X-Sluice-Deny-Status"
	HeaderToken      = "X-Sluice-Token"
	// A reservation's (reserve.go): the estimate to reserve and the
	// record's TTL on a check, the id on its answer and on a settle, and
	// the actual cost on a settle.
	HeaderReserve     = "X-Sluice-Reserve"
	HeaderReserveTTL  = "X-Sluice-Reserve-Ttl"
	HeaderReservation = "X-Sluice-Reservation"
	HeaderActual      = "X-Sluice-Actual"
)

// Check is one parsed check.
type Check struct {
	Policy string
	Key    string
	Cost   int64
	// Charge makes Cost a cost known after the work (the tokens an LLM
	// answer used): taken even over the limit, never refused
	// (engine.Request's Charge).
	Charge bool
	// Reserve makes Cost an estimate to reserve (reserve=N): taken as a
	// cost is, and answered with a reservation id to settle with the
	// actual cost (service's Reserve). ReserveTTL is its record's TTL;
	// zero: the service's default.
	Reserve    bool
	ReserveTTL time.Duration
	DenyStatus int // the status of a refusal: 429, or 401 or 403 for nginx's auth_request
}

// BadRequest is a check that cannot be decided; its text is the one-line
// reason the 400 carries.
type BadRequest struct{ Reason string }

func (e *BadRequest) Error() string { return e.Reason }

func bad(format string, args ...any) error {
	return &BadRequest{Reason: fmt.Sprintf(format, args...)}
}

// Parse reads a check from a request's path, raw query and headers. There
// are two forms, so that no recipe lets a client choose its own policy,
// key or cost:
//
//   - the query form, Path?policy=NAME&key=KEY[&cost=N | &charge=N][&deny_status=403],
//     read from the query alone (every X-Sluice-* header is ignored); the
//     key may instead come from keyHeader, a header the operator names.
//     nginx's subrequest and Traefik's fixed address use it.
//   - the header form, Path with no query or any path under Path/: the
//     X-Sluice-* headers, and the key from keyHeader when the operator
//     names one (X-Sluice-Key is then ignored). Envoy's ext_authz uses it.
//
// A parameter or X-Sluice-* header given twice, an unknown parameter, or a
// bad value is a
// *BadRequest; so is a path that is neither form (its reason says so).
func Parse(path, rawQuery string, h http.Header, keyHeader string) (Check, error) {
	c := Check{Cost: 1, DenyStatus: http.StatusTooManyRequests}
	var cost, charge, reserve, ttl, deny string
	query := path == Path && rawQuery != ""
	switch {
	case query:
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			return c, bad("invalid query: %s", err.Error())
		}
		for name, vs := range q {
			if len(vs) > 1 {
				return c, bad("parameter %s given more than once", name)
			}
			switch name {
			case "policy":
				c.Policy = vs[0]
			case "key":
				c.Key = vs[0]
			case "cost":
				cost = vs[0]
			case "charge":
				charge = vs[0]
			case "reserve":
				reserve = vs[0]
			case "reserve_ttl":
				ttl = vs[0]
			case "deny_status":
				deny = vs[0]
			default:
				return c, bad("unknown parameter %q: expected policy, key, cost, charge, reserve, reserve_ttl or deny_status", name)
			}
		}
		if c.Key == "" && keyHeader != "" {
			c.Key = headerKey(h, keyHeader)
		}
	case path == Path || strings.HasPrefix(path, Path+"/"):
		// As in the query form, a header given twice is refused: which of
		// the two a reader takes differs from one proxy to the next.
		// keyHeader is the exception, read as headerKey says.
		for _, name := range []string{HeaderPolicy, HeaderKey, HeaderCost, HeaderCharge, HeaderReserve, HeaderReserveTTL, HeaderDenyStatus} {
			if len(h.Values(name)) > 1 && !(name == HeaderKey && keyHeader != "") {
				return c, bad("header %s given more than once", name)
			}
		}
		c.Policy = h.Get(HeaderPolicy)
		if keyHeader != "" {
			c.Key = headerKey(h, keyHeader)
		} else {
			c.Key = h.Get(HeaderKey)
		}
		cost, charge, deny = h.Get(HeaderCost), h.Get(HeaderCharge), h.Get(HeaderDenyStatus)
		reserve, ttl = h.Get(HeaderReserve), h.Get(HeaderReserveTTL)
	default:
		return c, bad("no check at %q: the check is %s", path, Path)
	}
	// What is missing is named in the form the check used: the query
	// form reads no X-Sluice-* header, so suggesting one would not help.
	switch {
	case c.Policy == "" && query:
		return c, bad("missing policy: give policy=NAME in the query (the query form reads no %s header)", HeaderPolicy)
	case c.Policy == "":
		return c, bad("missing policy: give the %s header, or the query form %s?policy=NAME&key=KEY", HeaderPolicy, Path)
	case c.Key == "" && keyHeader != "" && query:
		return c, bad("missing key: give key=KEY in the query, or the %s header", keyHeader)
	case c.Key == "" && query:
		return c, bad("missing key: give key=KEY in the query (the query form reads no %s header)", HeaderKey)
	case c.Key == "" && keyHeader != "":
		return c, bad("missing key: give the %s header (the key header this check was configured with)", keyHeader)
	case c.Key == "":
		return c, bad("missing key: give the %s header, or the query form %s?policy=NAME&key=KEY", HeaderKey, Path)
	}
	switch {
	case cost != "" && charge != "":
		return c, bad("both a cost and a charge: a check gives a cost before the work, or a charge after it")
	case reserve != "" && (cost != "" || charge != ""):
		return c, bad("a reservation with a cost or a charge: reserve=N is the cost, an estimate before the work; its actual cost is settled at %s", SettlePath)
	}
	what := "cost"
	switch {
	case charge != "":
		cost, c.Charge, what = charge, true, "charge"
	case reserve != "":
		cost, c.Reserve, what = reserve, true, "reserve"
	case ttl != "":
		return c, bad("a reserve_ttl without a reservation: give reserve=N, the estimate, with it")
	}
	if cost != "" {
		n, err := strconv.ParseInt(cost, 10, 64)
		if err != nil || n < 0 {
			return c, bad("invalid %s %q: must be a non-negative integer", what, cost)
		}
		c.Cost = n
	}
	if ttl != "" {
		d, why := engine.ParsePeriod(ttl)
		if why != "" {
			return c, bad("invalid reserve_ttl %q: %s", ttl, why)
		}
		c.ReserveTTL = d
	}
	if deny != "" {
		switch deny {
		case "401", "403", "429":
			c.DenyStatus, _ = strconv.Atoi(deny)
		default:
			return c, bad("invalid deny_status %q: must be 401, 403 or 429", deny)
		}
	}
	return c, nil
}

// headerKey is the key from the operator's header. X-Forwarded-For is a
// list to which each proxy appends the address it saw: the last entry is
// the one the nearest proxy (the operator's gateway) wrote, and the only
// one a client cannot choose.
func headerKey(h http.Header, name string) string {
	vs := h.Values(name)
	if len(vs) == 0 {
		return ""
	}
	v := vs[len(vs)-1]
	if strings.EqualFold(name, "X-Forwarded-For") {
		if i := strings.LastIndexByte(v, ','); i >= 0 {
			v = v[i+1:]
		}
	}
	return strings.TrimSpace(v)
}
