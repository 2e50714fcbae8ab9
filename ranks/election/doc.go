// Package election decides which of the traced processes of a node are
// ranks. It is pure: the processes the agent knows go in, with what it
// learnt of each, one Role for each comes out. It reads no /proc and
// keeps no state between calls; what must last (a helper stays a helper)
// comes back in as the role of the election before.
//
// # Roles
//
// A rank is one process. A process is
//   - Candidate: traced, with no sign of a rank yet: no rank in its
//     environment, no GPU call, no communicator;
//   - Rank: it names a rank in its environment, made a GPU call or
//     created a communicator, and no rule below makes it something else;
//   - Helper: a process the rank forked (a DataLoader's workers, pin-memory
//     and compile workers: they inherit its environment, RANK included),
//     followed and dumped inside the rank's dump, never a rank of its own;
//     Vote.Of names the rank it helps;
//   - Wrapper: shares a rank's identity without being it or below it (a
//     shell or pyenv's shim that runs the rank's python), neither a rank
//     nor dumped;
//   - Shadow: shares a live rank's identity with no kinship the election
//     knows of; not the rank while that one lives, the rank once alone;
//   - Outside: out of the agent's scope, never a rank;
//   - Exited.
//
// # Rules
//
// Processes with a known identity (from the environment, or the rank and
// size of their first communicator) that are neither exited nor outside
// are grouped by identity (job, rank, world size). In each group:
//
//  1. A process below (in the lineage the election knows, through exited
//     processes) an exited process of the same identity that was the
//     rank (not a wrapper, and running Python, the GPU or a communicator)
//     is a helper of that one: a DataLoader worker first looked at after
//     its rank died never becomes the rank.
//  2. The owner of the group is, among the processes not helpers or
//     wrappers, the one most like a rank: GPU calls or a communicator
//     (2) above Python (1) above neither (0). Of those alike, the outer
//     ones (none of the others above them); of those, with no kinship
//     known between them (a parent the agent never saw fork), the one
//     known first (Process.Seen): a rank's process comes before what its
//     tree runs, and the choice never turns on map order, even where
//     kinship and first sight disagree (a child known before its parent).
//  3. Every other process of the group is: a helper of the owner when it
//     is below the owner; a wrapper when the owner is below it or it is
//     less like a rank; else, unless already a helper or wrapper, a
//     shadow.
//
// Helper, wrapper and outside last until the process execs (the agent
// then passes it as a Candidate again); shadow is decided anew by every
// election. A group of one is its rank. A process with no known identity
// is a rank once it makes a GPU call (the agent numbers it).
//
// # Adding a role or a rule
//
// A new kind of process is a Role constant here, a rule in Elect and a
// row in elect_test.go; the agent's book (ranks.Book) only stores
// the votes.
package election
