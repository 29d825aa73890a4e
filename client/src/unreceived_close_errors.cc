// The public face of OpenClients' count of close errors nobody received.
#include "client/src/open_clients.h"
#include "perserve/client.h"

namespace perserve {

int64_t UnreceivedCloseErrors() { return client_internal::OpenClients::CloseErrorsReported(); }

void ReportUnreceivedCloseError(std::string_view role, std::string_view when, const Status& closed) {
  client_internal::OpenClients::ReportCloseError(role, when, closed);
}

}  // namespace perserve
