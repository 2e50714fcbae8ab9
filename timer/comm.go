package timer

import (
	"encoding/hex"
	"slices"
	"strconv"
)

// comm is one rank's view of one communicator.
type comm struct {
	id        string
	rank      int32
	nranks    int32
	issued    uint64
	completed uint64
	lastOp    string
	order     int
	last      int64 // monotonic ns of its creation or its latest collective
}

// CommIDString is the name of a communicator: hex of the first 16 bytes
// of its ncclUniqueId.
func CommIDString(id [16]byte) string { return hex.EncodeToString(id[:]) }

// comm returns the communicator of a handle, creating a process-local one
// ("local:<hex handle>") for a handle whose initialisation was not seen.
func (p *proc) comm(handle uint64) *comm {
	c := p.comms[handle]
	if c == nil {
		c = &comm{id: "local:" + strconv.FormatUint(handle, 16), rank: -1, order: p.commOrder, last: p.lastWork}
		p.commOrder++
		p.comms[handle] = c
	}
	return c
}

func (p *proc) commInit(ev *Event) {
	if ev.Phase == PhaseExit && ev.Ret != 0 {
		return
	}
	id := CommIDString(ev.CommID)
	if c := p.comms[ev.Comm]; c != nil && c.id == id {
		c.rank, c.nranks = ev.Rank, ev.NRanks // the same creation seen twice
		return
	}
	p.comms[ev.Comm] = &comm{id: id, rank: ev.Rank, nranks: ev.NRanks, order: p.commOrder, last: ev.Time}
	p.commOrder++
}

func (p *proc) commDestroy(ev *Event) {
	delete(p.comms, ev.Comm)
}

func (p *proc) commStates() []CommState {
	cs := make([]*comm, 0, len(p.comms))
	for _, c := range p.comms {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b *comm) int { return a.order - b.order })
	out := make([]CommState, len(cs))
	for i, c := range cs {
		out[i] = CommState{ID: c.id, Rank: c.rank, NRanks: c.nranks, Issued: c.issued, Completed: c.completed, LastOp: c.lastOp}
	}
	return out
}

// commByID finds a communicator of p by its cross-process id.
func (p *proc) commByID(id string) *comm {
	for _, c := range p.comms {
		if c.id == id {
			return c
		}
	}
	return nil
}

// hasGlobalComm says whether p knows any communicator by its unique id.
func (p *proc) hasGlobalComm() bool {
	for _, c := range p.comms {
		if !isLocal(c.id) {
			return true
		}
	}
	return false
}

func isLocal(id string) bool { return len(id) >= 6 && id[:6] == "local:" }
