//go:build !linux

package evloop

import (
	"errors"
	"time"
)

// Loop is an event loop, which only Linux has: elsewhere New fails with
// errors.ErrUnsupported, and no Loop exists to call.
type Loop struct{}

// Watcher is a descriptor registered with a loop.
type Watcher struct{}

// New fails: epoll is Linux's.
func New() (*Loop, error) { return nil, errors.ErrUnsupported }

func (*Loop) Run() error                                   { return errors.ErrUnsupported }
func (*Loop) Close() error                                 { return nil }
func (*Loop) Wake()                                        {}
func (*Loop) WakeAt(time.Time)                             {}
func (*Loop) Post(func()) bool                             { return false }
func (*Loop) OnTurn(func()) bool                           { return false }
func (*Loop) OwedIn(Owing) bool                            { return false }
func (*Loop) Hold(bool)                                    {}
func (*Loop) Watch(int, Events, Handler) (*Watcher, error) { return nil, errors.ErrUnsupported }
func (*Watcher) Set(Events) error                          { return errors.ErrUnsupported }
func (*Watcher) Remove()                                   {}
