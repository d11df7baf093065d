// The names this client shares with the server and the other clients, defined once here for C++.
#ifndef MSLITE_TRITON_SRC_PROTOCOL_H_
#define MSLITE_TRITON_SRC_PROTOCOL_H_

namespace mslite_triton {
namespace protocol {

// Copies of the wire contract's names (mslite_contract/protocol.py, settings.py); a test checks they match.
inline constexpr char BATCHING_SECTION[] = "dynamic_batching";
inline constexpr char MAX_BATCH_SIZE_KEY[] = "max_batch_size";
inline constexpr char MAX_QUEUE_DELAY_KEY[] = "max_queue_delay_microseconds";
inline constexpr char MAX_QUEUE_SIZE_KEY[] = "max_queue_size";
inline constexpr char QUEUE_POLICY_KEY[] = "default_queue_policy";
inline constexpr char ADMIN_KEY_ENV[] = "MSLITE_TRITON_KEY";
inline constexpr char ADMIN_KEY_HEADER[] = "mslite-key";  // the admin key's header (HTTP)
inline constexpr char RUNNER_SECTION[] = "runner";  // client-side only, never sent to the server
inline constexpr char MAX_PENDING_KEY[] = "max_pending_predicts";
inline constexpr char WORKERS_KEY[] = "workers_num";  // a tuned config.ini's sizes (`mslite-triton tune`)
inline constexpr char THREADS_KEY[] = "thread_num";
// A model built again with these inputs resized to shapes its file fixes: {input name: [full shape]} (JSON).
inline constexpr char RESIZED_INPUTS_PARAMETER[] = "resized_inputs";
inline constexpr char THREAD_AFFINITY_CORE_LIST_PARAMETER[] = "thread_affinity_core_list";  // cores, comma-separated

// The clients' own names (mslite_contract/protocol.py, settings.py; the test checks these too).
inline constexpr int DEFAULT_MAX_PENDING = 1000;  // MindSpore Lite's task-queue bound (kNumMaxTaskQueueSize)
inline constexpr char KEY_DIR_ENV[] = "MSLITE_TRITON_KEY_DIR";
inline constexpr char URL_ENV[] = "MSLITE_TRITON_URL";
inline constexpr char AUTOSTART_ENV[] = "MSLITE_TRITON_AUTOSTART";  // "0": never start a server of our own
inline constexpr char SERVE_CMD_ENV[] = "MSLITE_TRITON_SERVE_CMD";  // the command that runs mslite-triton
inline constexpr char BIND_PREFIX[] = "triton://";

// A client's own server (mslite_contract/own_server.py): how it is found and started, the lines it prints.
inline constexpr char SERVE_PROGRAM[] = "mslite-triton";
inline constexpr char CHECKOUT_VENV_BIN[] = ".venv/bin";
inline constexpr const char *PRIVATE_ARGS[] = {"serve", "--private"};
inline constexpr char HTTP_LINE[] = "HTTP ";
inline constexpr char KEY_LINE[] = "ADMIN KEY ";
inline constexpr char SERVING_LINE[] = "serving;";

}  // namespace protocol
}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_PROTOCOL_H_
