/** The sbx release this tree is: the `sbx.version` label, the OpenAPI document's and the MCP server's version. */
export const SBX_VERSION = '0.1.0';
