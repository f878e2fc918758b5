# Installs the pinned MCP SDK into SDK_DIR unless it is already there.
if(EXISTS ${SDK_DIR}/node_modules/@modelcontextprotocol/sdk/package.json)
  return()
endif()
execute_process(COMMAND ${NPM} ci --no-audit --no-fund WORKING_DIRECTORY ${SDK_DIR}
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "npm ci failed in ${SDK_DIR} (exit ${status}); check network access to the npm registry")
endif()
