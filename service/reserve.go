package service

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Reservations: a cost known only after the work (an LLM answer's tokens)
// is reserved before it at an estimate, and settled after it at what it
// cost. The reservation is a Grant (engine.Request) of the estimate: taken
// from the budget atomically, all or nothing, so that concurrent requests
// that each fit alone can never together overrun it. The settle then
// charges the excess (a Charge, taken even over the limit) or gives back
// what was not used (a Refund, as far as the algorithm keeps that exact:
// engine's refund).
//
// The reservation's record (its key, limits, estimate and the grant's
// Anchor) is held by the sidecar that made it, in memory, bounded in
// number, and ends at its TTL: a record that ends, or is lost with its
// sidecar, leaves the reservation charged at its estimate, which is what
// a reservation never settled costs. So a settle must reach the sidecar
// that reserved; any other answers that it knows no such reservation.

// Bounds on a reservation's TTL and on the records a sidecar holds.
const (
	// DefaultReservationTTL is a reservation's TTL when none is given:
	// the work it pays for (an LLM answer, a download) ends well within
	// it.
	DefaultReservationTTL = 5 * time.Minute
	// MaxReservationTTL bounds a reservation's TTL: a record held longer
	// holds memory for a settle that, for the windows, could no longer
	// give anything back (the window it took from has ended).
	MaxReservationTTL = time.Hour
	// DefaultMaxReservations is Config.MaxReservations's default.
	DefaultMaxReservations = 100_000
)

// TooManyReservationsError is a reservation refused because this sidecar
// holds Config.MaxReservations open already: nothing was taken.
type TooManyReservationsError struct{ Max int }

func (e *TooManyReservationsError) Error() string {
	return "too many reservations open: this sidecar holds at most " + strconv.Itoa(e.Max) +
		" (--max-reservations); settle them, or let them end at their TTL"
}

// UnknownReservationError is a settle of an id this sidecar holds no
// record of: settled already, ended at its TTL (and so charged at its
// estimate), or made by another sidecar.
type UnknownReservationError struct{ ID string }

func (e *UnknownReservationError) Error() string {
	return "unknown or expired reservation " + strconv.Quote(e.ID) + ": " + e.Why()
}

// Why is the error's reason, for a door that quotes the id its own way.
func (e *UnknownReservationError) Why() string {
	return "settled already, ended at its TTL (it stays charged at its estimate), or made through another sidecar (settle where you reserved)"
}

// NotGivenBackError is a settle whose give-back the store did not make:
// it was answered by Path (a failure mode while the store is away), and
// the reservation stays charged at its estimate.
type NotGivenBackError struct{ Path engine.Path }

func (e *NotGivenBackError) Error() string {
	return "not given back: the settle was answered by " + e.Path.String() +
		", not the store, so the reservation stays charged at its estimate"
}

// validateReserve checks what a reservation adds to a request: its TTL
// (zero: the default) and the estimate, which must be a take's (Grant
// refuses Peek and Charge itself, and the algorithms that cannot give
// back). It returns the TTL to hold the record for.
func validateReserve(ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		return DefaultReservationTTL, nil
	}
	if ttl < engine.MinPeriod || ttl > MaxReservationTTL {
		return 0, &engine.ParamError{Param: "ttl", Value: ttl.String(),
			Reason: "must be between 1ms and " + MaxReservationTTL.String()}
	}
	return ttl, nil
}

// Reservation is request i's reservation id, once the batch is decided:
// empty when it was refused, or when it was no reservation.
func (b *Batch) Reservation(i int) string { return b.meta[i].reservation }

// reserved makes the record of request i of a decided batch, a
// reservation, when it was admitted. What it took is its Cost when the
// store granted it; nothing when it was admitted without a grant (shadow
// mode's refusal answered as an admission, a failure mode that allows),
// and then the settle charges the whole actual cost, as CHARGE would.
func (s *Service) reserved(b *Batch, i int) {
	r, m, res := &b.reqs[i], &b.meta[i], &b.res[i]
	d := &res.Decision
	if !d.Allowed {
		return
	}
	h := &reservation{estimate: r.Cost, key: strings.Clone(r.Key), limit: r.Limit, limits: r.Limits,
		onFailure: r.OnFailure, durable: r.Durable, anchor: d.Anchor}
	if m.shadowed || (res.Path != engine.PathStore && res.Path != engine.PathLocal) {
		h.estimate, h.anchor = 0, 0
	} else if r.Multi() {
		// Each limit's grant is named by its own anchor (windows of
		// different lengths end apart): the refund reads them from its
		// detail.
		h.anchors = make([]int64, len(r.Detail))
		for j := range r.Detail {
			h.anchors[j] = r.Detail[j].Anchor
		}
	}
	m.reservation = s.reservations.open(m.policy, m.ttl, h)
}

// Settle ends the reservation id at the cost the work turned out to have,
// actual: the excess over its estimate is charged (taken even over the
// limit, as a charge is), what it did not use is given back (as far as
// the algorithm keeps that exact, engine's Refund), and an exact estimate
// changes nothing. It answers the decision of what it sent: a charge's
// (Allowed: whether it fitted; Remaining below zero when over), a
// refund's (Allowed; Remaining after it), or, for an exact estimate, a
// look at the key. The record is gone after, whatever the answer: a
// second settle is an *UnknownReservationError, and so is an id that
// ended at its TTL or that another sidecar made. When the store cannot
// answer, the error is returned and the reservation stays charged at its
// estimate.
func (s *Service) Settle(ctx context.Context, id string, actual int64) (engine.Decision, error) {
	if actual < 0 || actual > engine.MaxRate {
		s.CountError(ErrRequest)
		return engine.Decision{}, &engine.ParamError{Param: "actual", Value: strconv.FormatInt(actual, 10),
			Reason: "must be between 0 and " + strconv.FormatInt(engine.MaxRate, 10)}
	}
	h := s.reservations.take(id)
	if h == nil {
		s.CountError(ErrRequest)
		return engine.Decision{}, &UnknownReservationError{ID: id}
	}
	req := engine.Request{Key: h.key, Limit: h.limit, Limits: h.limits, OnFailure: h.onFailure, Durable: h.durable}
	switch delta := actual - h.estimate; {
	case delta > 0:
		req.Cost, req.Charge = delta, true
	case delta < 0:
		req.Cost, req.Refund, req.Anchor = -delta, true, h.anchor
	default:
		req.Peek = true
	}
	if req.Multi() {
		req.Detail = make([]engine.Decision, len(req.Limits))
		if req.Refund {
			for j, a := range h.anchors {
				req.Detail[j].Anchor = a
			}
		}
	}
	var deadline time.Time
	if dl, ok := ctx.Deadline(); ok {
		deadline = dl
	}
	var res [1]engine.Result
	err := engine.Wait(s.store, []engine.Request{req}, res[:], deadline)
	if err == nil {
		err = res[0].Err
	}
	if err == nil && req.Refund && (!res[0].Decision.Allowed || res[0].Path != engine.PathStore) {
		// A refund is never refused by the store: refused, or decided
		// by anything else (a failure mode), it was not given back.
		err = &NotGivenBackError{Path: res[0].Path}
	}
	if err != nil {
		if errors.Is(err, engine.ErrInvalid) {
			s.CountError(ErrRequest)
		} else {
			s.CountError(ErrStore)
		}
		return engine.Decision{}, err
	}
	h.counts.events[ReservationSettled].Add(1)
	if req.Charge {
		h.counts.excess.Add(uint64(req.Cost))
	} else if req.Refund {
		h.counts.givenBack.Add(uint64(req.Cost))
	}
	return res[0].Decision, nil
}

// ReservationEvent is what happened to a reservation, for its counter.
type ReservationEvent uint8

// The reservation events.
const (
	ReservationMade    ReservationEvent = iota // admitted: its record held
	ReservationSettled                         // settled through this sidecar
	ReservationExpired                         // ended at its TTL, charged at its estimate
	numReservationEvents
)

var reservationEventNames = [numReservationEvents]string{"made", "settled", "expired"}

func (e ReservationEvent) String() string { return reservationEventNames[e] }

// reservationCounts is one policy's reservation counters.
type reservationCounts struct {
	events    [numReservationEvents]atomic.Uint64
	open      atomic.Int64
	excess    atomic.Uint64 // units settles charged over the estimates
	givenBack atomic.Uint64 // units settles gave back under them
}

// reservation is one reservation's record: what a settle needs to charge or give
// back without asking the client again.
type reservation struct {
	key       string // under the policy's prefix, owned
	limit     engine.Limit
	limits    []engine.NamedLimit // a multi-limit policy's, shared and read only
	estimate  int64               // what the grant took
	anchor    int64               // the grant's Decision.Anchor, for the refund
	anchors   []int64             // a multi-limit grant's, each limit's (Detail's)
	onFailure engine.FailureMode
	durable   engine.Durability
	ends      time.Time
	counts    *reservationCounts
}

func (h *reservation) end() time.Time { return h.ends }

func (h *reservation) expire() {
	h.counts.open.Add(-1)
	h.counts.events[ReservationExpired].Add(1)
}

// reservationBook holds the records of the reservations made through this
// sidecar until they are settled or end. A record past its end is never
// settled (take checks), so a late sweep costs memory, never a wrong
// answer.
type reservationBook struct {
	max      int
	byPolicy registry[reservationCounts]
	book[string, *reservation]
}

// full reports whether the book holds its most: a new reservation is
// then refused before it takes anything. Reservations being decided are
// not counted, so the book may pass max by as many as are in flight.
func (b *reservationBook) full() bool {
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.roomLocked(now, b.max)
}

// open records h under a new id for ttl and returns the id.
func (b *reservationBook) open(policy string, ttl time.Duration, h *reservation) string {
	c := b.byPolicy.get(policy)
	h.counts = c
	h.ends = b.clock().Add(ttl)
	b.mu.Lock()
	defer b.mu.Unlock()
	id := engine.NewLeaseID()
	for b.entries[id] != nil { // 63 random bits: a clash is all but impossible, and harmless
		id = engine.NewLeaseID()
	}
	b.addLocked(id, h)
	c.open.Add(1)
	c.events[ReservationMade].Add(1)
	return id
}

// take removes id's record and returns it; nil when there is none, or
// when it has ended (it is then counted as expired).
func (b *reservationBook) take(id string) *reservation {
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.removeLocked(id)
	switch {
	case !ok:
		return nil
	case !now.Before(h.ends):
		h.expire()
		return nil
	}
	h.counts.open.Add(-1)
	return h
}

// ReservationStats are one policy's reservation counts.
type ReservationStats struct {
	Open   int64                        // made through this sidecar, not settled nor ended
	Events [numReservationEvents]uint64 // by ReservationEvent
	// Excess is the units settles charged over their estimates: the most
	// the budgets can have been overrun by (estimates too low).
	Excess uint64
	// GivenBack is the units settles gave back under their estimates
	// (estimates too high: held from other requests until the settle).
	GivenBack uint64
}

// EachReservationPolicy calls f with each policy's reservation counts
// (Inline for the inline RL.RESERVE), for metrics and INFO; records that
// ended by now are counted as expired first.
func (s *Service) EachReservationPolicy(f func(policy string, st ReservationStats)) {
	s.reservations.sweep()
	s.reservations.byPolicy.each(func(policy string, c *reservationCounts) {
		st := ReservationStats{Open: c.open.Load(), Excess: c.excess.Load(), GivenBack: c.givenBack.Load()}
		for e := range numReservationEvents {
			st.Events[e] = c.events[e].Load()
		}
		f(policy, st)
	})
}

// InfoReservations is INFO's Reservations section, summed over policies
// (the metrics have them per policy), as name-value pairs in INFO's
// order.
func (s *Service) InfoReservations() [][2]string {
	var t ReservationStats
	s.EachReservationPolicy(func(_ string, st ReservationStats) {
		t.Open += st.Open
		t.Excess += st.Excess
		t.GivenBack += st.GivenBack
		for e := range st.Events {
			t.Events[e] += st.Events[e]
		}
	})
	f := [][2]string{{"reservations_open", strconv.FormatInt(t.Open, 10)}}
	for e, n := range t.Events {
		f = append(f, [2]string{"reservations_" + ReservationEvent(e).String(), strconv.FormatUint(n, 10)})
	}
	return append(f,
		[2]string{"reservation_excess_units", strconv.FormatUint(t.Excess, 10)},
		[2]string{"reservation_units_given_back", strconv.FormatUint(t.GivenBack, 10)})
}

// reserve makes req a reservation: a Grant of its Cost, the estimate, its
// record to be held for ttl once admitted. A full book refuses it here,
// before anything is taken.
func (b *Batch) reserve(req *engine.Request, m *meta, ttl time.Duration) error {
	ttl, err := validateReserve(ttl)
	if err != nil {
		return err
	}
	if book := &b.s.reservations; book.full() {
		return &TooManyReservationsError{Max: book.max}
	}
	req.Grant, m.reserve, m.ttl = true, true, ttl
	return nil
}
