/*
 * What agent.c uses of signals.c: the agent's hold on SIGTRAP. Internal to the agent
 * (hidden: the library exports the rtld-audit interface only).
 */
#ifndef COLDSTART_AGENT_SIGNALS_H
#define COLDSTART_AGENT_SIGNALS_H

#include <signal.h>
#include <ucontext.h>

#pragma GCC visibility push(hidden)

/* The program's SIGTRAP action as it was when the agent installed its handler. */
void signals_take_over(const struct sigaction *before);

/* The program's C library's __libc_sigaction and __errno_location, which the redirected
 * functions call. */
void signals_use_libc(void *libc_sigaction, void *errno_location);

/* Set the program's errno (that of its C library, not the agent's own copy). */
void program_set_errno(int e);

/* What the C library's __sigaction (= sigaction) and pthread_sigmask do once redirected. */
int agent_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
int agent_sigmask(int how, const sigset_t *set, sigset_t *old);

/* Run the program's own SIGTRAP action for a trap that is not a breakpoint. */
void program_trap(int sig, siginfo_t *info, ucontext_t *uc);

#pragma GCC visibility pop

#endif
