// Exit statuses shared by every command, the full CLI's and the lean front end's.
#pragma once

namespace maf_sandbox::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRefused = 1;   // a policy refusal, a failed probe, a failed command
inline constexpr int kExitBadInput = 2;  // bad flags, malformed JSON, unknown enum strings

}  // namespace maf_sandbox::cli
